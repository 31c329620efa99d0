"""The recipe's output stage (dims, precision): grammar, JSON, widths, errors, and the
functional core (poolkit.output) against sentence-transformers' quantize_embeddings."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sentence_transformers.util.quantization import quantize_embeddings

from poolkit import Recipe, RecipeError
from poolkit.output import (
    PRECISIONS,
    Calibration,
    bytes_per_vector,
    hamming_distances,
    quantize,
    truncate,
    unpack_bits,
)

NAMES = [
    "mean/256",
    "mean/l2/256/int8",
    "mean/raw/64/binary",
    "mean@last4:concat/128/ubinary",
    "cls+mean_no_special/float16",
    "mean/uint8",
    "mean_no_special@-1,-2/8",
]


@pytest.mark.parametrize("name", NAMES)
def test_output_stage_names_round_trip(name: str) -> None:
    r = Recipe.parse(name)
    assert str(r) == name
    assert Recipe.parse(str(r)) == r
    assert Recipe.from_json(json.loads(json.dumps(r.to_json()))) == r
    assert r.to_json()["version"] == 2
    assert r.pooling == r.replace(dims=None, precision=None)
    assert not r.pooling.has_output_stage


def test_segments_in_any_order_and_float32_is_the_default() -> None:
    assert Recipe.parse("mean/int8/l2/256") == Recipe.parse("mean/l2/256/int8")
    assert Recipe.parse("mean/float32") == Recipe.parse("mean")
    assert Recipe(precision="float32") == Recipe()
    assert Recipe.parse("mean/256") == Recipe("mean", dims=256)
    # A recipe without an output stage still writes version 1 JSON (older readers read it).
    assert Recipe.parse("mean@last4").to_json()["version"] == 1
    # A span strategy with '/' keeps it.
    assert Recipe.parse("span:x/y").strategy == "x/y"


@pytest.mark.parametrize(
    ("name", "dim", "nbytes"),
    [("mean", 384, 1536), ("mean/256", 256, 1024), ("mean/256/float16", 256, 512),
     ("mean/128/int8", 128, 128), ("mean/uint8", 384, 384), ("mean/binary", 384, 48),
     ("mean/100/ubinary", 100, 13), ("cls+mean/512/binary", 512, 64)],
)  # fmt: skip
def test_output_dim_and_bytes_per_vector(name: str, dim: int, nbytes: int) -> None:
    r = Recipe.parse(name)
    assert r.output_dim(384) == dim
    assert r.bytes_per_vector(384) == nbytes


@pytest.mark.parametrize(
    ("name", "match"),
    [
        ("mean/500", "at most the recipe's width 384"),
        ("mean/0", "positive number of dimensions"),
        ("mean/int4", "one of float32, float16, int8, uint8, binary, ubinary.*Closest: int8"),
        ("word:first/int8", "no output stage.*word level"),
        ("span:x,y/binary", "no output stage.*span level"),
        ("word:mean/64", "no output stage.*word level"),
        ("mean/256/128", "at most one /dims"),
    ],
)
def test_bad_output_stage_is_one_line(name: str, match: str) -> None:
    with pytest.raises(RecipeError, match=match) as info:
        Recipe.parse(name).output_dim(384)
    assert "\n" not in str(info.value)


def test_keyword_errors_name_the_field() -> None:
    with pytest.raises(RecipeError, match="`dims`"):
        Recipe(dims=-3)
    with pytest.raises(RecipeError, match="`precision`"):
        Recipe(precision="int4")
    with pytest.raises(RecipeError, match=r"`precision`.*word level"):
        Recipe("first", level="word", precision="binary")


# --------------------------------------------------------------------- functional core


@pytest.fixture(scope="module")
def vectors() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.standard_normal((200, 64)).astype(np.float32)


@pytest.mark.parametrize("precision", ["binary", "ubinary"])
def test_binary_equals_sentence_transformers_bit_for_bit(vectors, precision) -> None:
    ours = quantize(vectors, precision)
    ref = quantize_embeddings(vectors, precision)
    assert ours.dtype == ref.dtype and ours.shape == ref.shape == (200, 8)
    assert np.array_equal(ours, ref)


@pytest.mark.parametrize("precision", ["int8", "uint8"])
def test_int8_equals_sentence_transformers_with_the_same_calibration(vectors, precision) -> None:
    calib, rest = vectors[:150], vectors[150:]
    beyond = rest * 3  # values outside the calibration range too
    ours = quantize(beyond, precision, Calibration.from_vectors(calib))
    ref = quantize_embeddings(beyond, precision, calibration_embeddings=calib)
    assert ours.dtype == ref.dtype and np.array_equal(ours, ref)
    # The calibration vectors themselves, and ranges passed as ranges.
    ranges = np.vstack((calib.min(axis=0), calib.max(axis=0)))
    ours = quantize(calib, precision, Calibration.from_ranges(ranges))
    assert np.array_equal(ours, quantize_embeddings(calib, precision, ranges=ranges))


def test_int8_clips_outside_the_range_and_constant_dimensions() -> None:
    calib = np.array([[0.0, 1.0], [1.0, 1.0]], np.float32)
    c = Calibration.from_vectors(calib)
    out = quantize(np.array([[-5.0, 1.0], [9.0, 3.0], [0.5, 1.0]], np.float32), "uint8", c)
    assert out.tolist() == [[0, 0], [255, 2], [127, 0]]
    # The maximum itself: 1 / (1 / 255) rounds just below 255 in float32, as in ST.
    assert quantize(calib, "int8", c).tolist() == [[-128, -128], [126, -128]]
    assert np.array_equal(quantize(calib, "int8", c),
                          quantize_embeddings(calib, "int8", calibration_embeddings=calib))  # fmt: skip
    ref = quantize_embeddings(np.array([[-5.0, 1.0], [9.0, 3.0]], np.float32), "uint8",
                              calibration_embeddings=calib)  # fmt: skip
    assert ref.tolist() == [[0, 0], [255, 2]]


def test_int8_without_calibration_is_one_line(vectors) -> None:
    with pytest.raises(ValueError, match=r"`calibration`.*Pass calibration="):
        quantize(vectors, "int8")
    with pytest.raises(ValueError, match="ranges for 64 dimensions"):
        quantize(vectors, "int8", Calibration.from_vectors(vectors[:, :8]))


def test_calibration_json_round_trips_exactly(vectors) -> None:
    c = Calibration.from_vectors(vectors, "test")
    back = Calibration.from_json(json.dumps(c.to_json()))
    assert back == c and back.source == "test"
    assert np.array_equal(quantize(vectors, "int8", back), quantize(vectors, "int8", c))


def test_float_precisions_and_truncation(vectors) -> None:
    assert quantize(vectors, "float32").dtype == np.float32
    assert np.array_equal(quantize(vectors, "float16"), vectors.astype(np.float16))
    cut = truncate(vectors, 16, normalize=True)
    ref = vectors[:, :16] / np.linalg.norm(vectors[:, :16], axis=1, keepdims=True)
    np.testing.assert_allclose(cut, ref, atol=1e-6)
    assert np.array_equal(truncate(vectors, 16, normalize=False), vectors[:, :16])
    assert set(PRECISIONS) == {"float32", "float16", "int8", "uint8", "binary", "ubinary"}
    assert bytes_per_vector(384, None) == 1536


@pytest.mark.parametrize("precision", ["binary", "ubinary"])
def test_hamming_distances_are_exact(vectors, precision) -> None:
    dims = 60  # not a multiple of 8: the pad bits are zero in every row
    stored = quantize(vectors[:, :dims], precision)
    bits = unpack_bits(stored, dims)
    assert np.array_equal(bits, (vectors[:, :dims] > 0).astype(np.uint8))
    d = hamming_distances(stored[:7], stored, dims)
    ref = (bits[:7, None, :] != bits[None, :, :]).sum(-1)
    assert np.array_equal(d, ref)


# --------------------------------------------------------------------- library: embed


@pytest.fixture(scope="module")
def st_reference(minilm_dir):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(minilm_dir), device="cpu")

    def encode(texts, k=None, **kw):
        return model.encode(texts, batch_size=64, truncate_dim=k, **kw)

    return encode


@pytest.fixture(scope="module")
def texts(sts_dev) -> list[str]:
    return sts_dev[:120]


@pytest.mark.parametrize("k", [384, 256, 64])
def test_embed_truncates_as_sentence_transformers(minilm_dir, st_reference, texts, k) -> None:
    import poolkit

    ref = st_reference(texts, k, normalize_embeddings=True)  # the model normalises
    ours = poolkit.embed(texts, minilm_dir, recipe=f"mean/{k}", device="cpu")
    assert ours.shape == ref.shape and ours.dtype == np.float32
    np.testing.assert_allclose(ours, ref, atol=1e-6)
    # The keyword spelling is the same recipe; /raw keeps the truncated values as they are.
    assert np.array_equal(poolkit.embed(texts, minilm_dir, dims=k, device="cpu"), ours)
    raw = poolkit.embed(texts, minilm_dir, recipe=f"mean/raw/{k}", device="cpu", pipeline="pooled")
    plain = st_reference(texts, k, normalize_embeddings=False, output_value="sentence_embedding")
    unnormalised = poolkit.embed(texts, minilm_dir, recipe="mean/raw", pipeline="pooled",
                                 device="cpu")  # fmt: skip
    np.testing.assert_allclose(raw, unnormalised[:, :k], atol=0)
    assert plain.shape == raw.shape


@pytest.mark.parametrize("precision", ["binary", "ubinary"])
def test_embed_binary_as_sentence_transformers(minilm_dir, st_reference, texts, precision) -> None:
    import poolkit

    ref = st_reference(texts, 128, normalize_embeddings=True, precision=precision)
    ours = poolkit.embed(texts, minilm_dir, recipe=f"mean/128/{precision}", device="cpu")
    assert ours.dtype == ref.dtype and ours.shape == (len(texts), 16)
    assert np.array_equal(ours, ref)


@pytest.mark.parametrize("precision", ["int8", "uint8"])
def test_embed_int8_with_calibration(minilm_dir, st_reference, sts_dev, texts, precision) -> None:
    import poolkit

    calib_texts = sts_dev[120:320]
    floats = poolkit.embed(texts, minilm_dir, recipe="mean/256", device="cpu")
    calib = poolkit.embed(calib_texts, minilm_dir, recipe="mean/256", device="cpu")
    name = f"mean/256/{precision}"
    ours, stats = poolkit.embed(texts, minilm_dir, recipe=name, device="cpu",
                                calibration=calib_texts, return_stats=True)  # fmt: skip
    # Bit for bit with quantize_embeddings on the same vectors and calibration vectors.
    assert np.array_equal(
        ours, quantize_embeddings(floats, precision, calibration_embeddings=calib)
    )
    # The ranges come back, and quantise the next batch (queries) the same way.
    cal = stats.calibration[name]
    assert cal.dims == 256 and f"{len(calib_texts)} calibration texts" in cal.source
    again = poolkit.embed(texts, minilm_dir, recipe=name, device="cpu", calibration=cal)
    assert np.array_equal(again, ours)
    # Calibration vectors, of the truncated or the full width, give the same ranges.
    full = poolkit.embed(calib_texts, minilm_dir, device="cpu")
    for vectors in (calib, full):
        out = poolkit.embed(texts, minilm_dir, recipe=name, device="cpu", calibration=vectors)
        assert np.array_equal(out, ours)
    # sentence-transformers end to end: its float vectors differ by ~3e-8, so a value on a
    # bucket's edge may land one bucket over.
    st_floats = st_reference(texts, 256, normalize_embeddings=True)
    st_calib = st_reference(calib_texts, 256, normalize_embeddings=True)
    ref = quantize_embeddings(st_floats, precision, calibration_embeddings=st_calib)
    assert ours.dtype == ref.dtype
    diff = np.abs(ours.astype(np.int16) - ref.astype(np.int16))
    assert diff.max() <= 1 and (diff == 0).mean() > 0.999


def test_embed_output_stage_errors_are_one_line(minilm_dir, texts) -> None:
    import poolkit

    cases = [
        (dict(recipe="mean/int8"), r"`calibration`.*int8 recipe 'mean/int8'.*Pass calibration="),
        (dict(recipe="mean/999"), r"`dims`.*at most the recipe's width 384"),
        (dict(recipe="mean", calibration=texts), r"`calibration`.*None for recipes without"),
        (dict(recipe="mean/256", dims=128), r"`dims`.*as the recipe 'mean/256' says"),
        (dict(precision="int4"), r"`precision`.*one of float32"),
        (dict(recipe="mean/64/int8", calibration=Calibration.from_vectors(np.ones((2, 8)))),
         r"ranges for 64 dimensions"),
    ]  # fmt: skip
    for kwargs, match in cases:
        with pytest.raises(ValueError, match=match) as info:
            poolkit.embed(texts[:3], minilm_dir, device="cpu", **kwargs)
        assert "\n" not in str(info.value)


def test_export_refuses_a_precision_its_format_cannot_hold_before_writing(
    minilm_dir, tmp_path
) -> None:
    import poolkit

    # A sentence-transformers folder returns float vectors; the ONNX graph holds int8
    # (tests/test_export_stage.py), given its ranges.
    with pytest.raises(ValueError, match=r"without /PRECISION.*format='onnx'") as info:
        poolkit.export(minilm_dir, tmp_path / "out", recipe="mean/256/int8")
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match=r"`calibration`.*ranges of the int8") as info:
        poolkit.export(minilm_dir, tmp_path / "out", recipe="mean/256/int8", format="onnx")
    assert "\n" not in str(info.value) and not (tmp_path / "out").exists()
