"""``poolkit export`` of a sparse (SPLADE) recipe, on tiny random masked-LM folders of three
architectures: the ``SparseEncoder`` folder loads in sentence-transformers and gives
``poolkit.embed``'s vectors, the ONNX graph gives them on bare onnxruntime + tokenizers, and
both equal sentence-transformers' own ``SparseEncoder`` built from the source (1e-5 per
weight); refusals are one line and write nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from clitools import one_error_line, poolkit
from equality import RUNTIME_BOUND
from tiny_models import build_mlm, build_sparse_encoder

import poolkit as pk
from poolkit.sparse import SPARSE_STRATEGIES

pytestmark = pytest.mark.filterwarnings("ignore::poolkit.driver.TruncationWarning")

TEXTS = [
    "John works at Google in London.",
    "a cat",
    "The quick brown fox jumps over the lazy dog, and keeps running past the end of the model's "
    "maximum length so that truncation applies here too, again and again and again.",
    "",
    "Pooling turns token vectors into one vector per text.",
]
TOL = RUNTIME_BOUND  # docs/equality.md: another runtime against torch
ARCHS = ("bert_dense", "distilbert", "roberta")
# Per architecture, recipes covering both poolings, both activations and /topK.
CASES = [
    ("bert_dense", "splade"),
    ("bert_dense", "splade_sum_log1p/top7"),
    ("distilbert", "splade_sum"),
    ("distilbert", "splade_log1p/top5"),
    ("roberta", "splade/top9"),
    ("roberta", "splade_sum_log1p"),
]


def _mlm(name: str, dest: Path) -> Path:
    """A tiny masked-LM folder whose tokenizer says 48 tokens, as a real checkpoint's does
    (its 512): poolkit and sentence-transformers read the limit there, and the long text is
    cut at it."""
    build_mlm(name, dest)
    config = json.loads((dest / "tokenizer_config.json").read_text())
    config["model_max_length"] = 48
    (dest / "tokenizer_config.json").write_text(json.dumps(config))
    return dest


@pytest.fixture(scope="module")
def mlm_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mlm")
    return {name: _mlm(name, root / name) for name in ARCHS}


def _reference(source: Path, recipe: str) -> np.ndarray:
    """sentence-transformers' own SparseEncoder over the source checkpoint: ``(N, V)``."""
    from sentence_transformers.sparse_encoder import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    r = pk.Recipe.parse(recipe)
    length = pk.model_info(source).max_length
    modules = [MLMTransformer(str(source), max_seq_length=length),
               SpladePooling(*SPARSE_STRATEGIES[r.strategy])]  # fmt: skip
    st = SparseEncoder(modules=modules, device="cpu", max_active_dims=r.top_k)
    return st.encode(TEXTS, convert_to_tensor=True).to_dense().numpy()


def _onnx(folder: Path, texts: list[str], names: list[str], side: str = "right") -> list:
    """The folder as a server runs it: onnxruntime and tokenizers, nothing of poolkit."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_padding(direction=side, pad_id=tok.padding["pad_id"],
                       pad_token=tok.padding["pad_token"])  # fmt: skip
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    inputs = {i.name for i in session.get_inputs()}
    enc = tok.encode_batch(texts)
    feed = {"input_ids": [e.ids for e in enc], "attention_mask": [e.attention_mask for e in enc],
            "token_type_ids": [e.type_ids for e in enc]}  # fmt: skip
    feed = {k: np.array(v, dtype=np.int64) for k, v in feed.items() if k in inputs}
    return session.run(names, feed)


@pytest.mark.parametrize(("arch", "recipe"), CASES)
def test_sparse_encoder_folder_equals_embed(mlm_dirs, arch, recipe, tmp_path) -> None:
    from sentence_transformers.sparse_encoder import SparseEncoder

    source = mlm_dirs[arch]
    out = pk.export(source, tmp_path / "st", recipe=recipe)
    want = pk.embed(TEXTS, model=source, recipe=recipe)
    st = SparseEncoder(str(out), device="cpu")
    got = st.encode(TEXTS, convert_to_tensor=True).to_dense().numpy()
    np.testing.assert_allclose(got, want.toarray(), rtol=0, atol=TOL)
    np.testing.assert_allclose(got, _reference(source, recipe), rtol=0, atol=TOL)
    top_k = pk.Recipe.parse(recipe).top_k
    assert st.max_active_dims == top_k
    modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads((out / "modules.json").read_text())]
    assert modules == ["MLMTransformer", "SpladePooling"]
    record = json.loads((out / "poolkit-export.json").read_text())
    assert record["recipe"] == recipe and record["output_dim"] == want.shape[1]
    # poolkit reads the folder back as the recipe it was exported as.
    assert pk.model_info(out).pooling == recipe
    again = pk.embed(TEXTS, model=out)
    np.testing.assert_allclose(again.toarray(), want.toarray(), rtol=0, atol=TOL)
    assert "SparseEncoder(" in (out / "README.md").read_text()


@pytest.mark.parametrize(("arch", "recipe"), CASES)
def test_onnx_graph_on_bare_onnxruntime_equals_embed(mlm_dirs, arch, recipe, tmp_path) -> None:
    import onnxruntime as ort

    source = mlm_dirs[arch]
    r = pk.Recipe.parse(recipe)
    out = pk.export(source, tmp_path / "onnx", recipe=recipe, format="onnx")
    want = pk.embed(TEXTS, model=source, recipe=recipe)
    reference = _reference(source, recipe)
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    outputs = {o.name: o.type for o in session.get_outputs()}
    if r.top_k is None:
        assert outputs == {"sparse_embedding": "tensor(float)"}
    else:
        assert outputs == {"sparse_embedding": "tensor(float)", "top_indices": "tensor(int64)",
                           "top_values": "tensor(float)"}  # fmt: skip
    names = list(outputs)
    for side in ("right", "left"):
        batch = dict(zip(names, _onnx(out, TEXTS, names, side), strict=True))
        one = [dict(zip(names, _onnx(out, [t], names), strict=True)) for t in TEXTS]
        for got in (batch, {n: np.concatenate([o[n] for o in one]) for n in names}):
            dense = got["sparse_embedding"]
            assert dense.shape == want.shape and dense.dtype == np.float32
            np.testing.assert_allclose(dense, want.toarray(), rtol=0, atol=TOL)
            np.testing.assert_allclose(dense, reference, rtol=0, atol=TOL)
            if r.top_k is None:
                continue
            ids, values = got["top_indices"], got["top_values"]
            assert ids.shape == values.shape == (len(TEXTS), r.top_k)
            assert np.all(np.diff(values, axis=1) <= 0)  # largest first
            # The (id, weight) pairs with a weight are the CSR rows poolkit.embed gives.
            rows = np.repeat(np.arange(len(TEXTS)), r.top_k)
            keep = values.ravel() != 0
            pairs = sp.csr_array((values.ravel()[keep], (rows[keep], ids.ravel()[keep])),
                                 shape=want.shape)  # fmt: skip
            assert np.array_equal(np.sort(pairs.indices), np.sort(want.indices))
            np.testing.assert_allclose(pairs.toarray(), want.toarray(), rtol=0, atol=TOL)
    record = json.loads((out / "poolkit-export.json").read_text())
    assert record["onnx"]["outputs"] == names
    assert record["agreement"]["fp32"]["max_abs_diff"] <= 1e-4
    assert "sparse_embedding" in (out / "README.md").read_text()


def test_modernbert_graph_equals_embed(tmp_path) -> None:
    source = _mlm("modernbert", tmp_path / "modernbert")
    for recipe in ("splade", "splade_sum/top6"):
        out = pk.export(source, tmp_path / recipe.replace("/", "_"), recipe=recipe, format="onnx")
        (dense,) = _onnx(out, TEXTS, ["sparse_embedding"])
        want = pk.embed(TEXTS, model=source, recipe=recipe).toarray()
        np.testing.assert_allclose(dense, want, rtol=0, atol=TOL)
        np.testing.assert_allclose(dense, _reference(source, recipe), rtol=0, atol=TOL)


def test_a_sparse_encoder_source_exports_its_own_pooling(mlm_dirs, tmp_path) -> None:
    """No recipe: the source folder's SpladePooling and max_active_dims; a recipe without
    /topK drops the source's max_active_dims."""
    from sentence_transformers.sparse_encoder import SparseEncoder

    source = build_sparse_encoder(mlm_dirs["distilbert"], tmp_path / "src", "sum", "log1p_relu")
    SparseEncoder(str(source), device="cpu", max_active_dims=6).save(str(source))
    want = SparseEncoder(str(source), device="cpu").encode(TEXTS, convert_to_tensor=True)
    want = want.to_dense().numpy()
    out = pk.export(source, tmp_path / "st")
    assert (
        json.loads((out / "poolkit-export.json").read_text())["recipe"] == "splade_sum_log1p/top6"
    )
    got = SparseEncoder(str(out), device="cpu").encode(TEXTS, convert_to_tensor=True)
    np.testing.assert_allclose(got.to_dense().numpy(), want, rtol=0, atol=TOL)
    (dense,) = _onnx(pk.export(source, tmp_path / "onnx", format="onnx"), TEXTS,
                     ["sparse_embedding"])  # fmt: skip
    np.testing.assert_allclose(dense, want, rtol=0, atol=TOL)
    plain = pk.export(source, tmp_path / "plain", recipe="splade_sum_log1p")
    config = json.loads((plain / "config_sentence_transformers.json").read_text())
    assert "max_active_dims" not in config and config["model_type"] == "SparseEncoder"
    assert SparseEncoder(str(plain), device="cpu").max_active_dims is None
    # The folder's own recipe is sparse: int8 is refused once it is known, before any write.
    with pytest.raises(pk.InputError, match="None for a sparse recipe"):
        pk.export(source, tmp_path / "int8", format="onnx", quantize="int8")
    assert not (tmp_path / "int8").exists()


def test_cli_writes_the_onnx_folder(mlm_dirs, tmp_path) -> None:
    source = mlm_dirs["bert_dense"]
    r = poolkit("export", "-m", str(source), "-o", "out", "--format", "onnx", "--recipe",
                "splade/top4", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    assert "splade/top4" in r.stderr.decode() and "as onnx" in r.stderr.decode()
    ids, values = _onnx(tmp_path / "out", TEXTS, ["top_indices", "top_values"])
    want = pk.embed(TEXTS, model=source, recipe="splade/top4").toarray()
    np.testing.assert_allclose(np.take_along_axis(want, ids, axis=1), values, rtol=0, atol=TOL)
    np.testing.assert_allclose(values, -np.sort(-want, axis=1)[:, :4], rtol=0, atol=TOL)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--recipe", "splade", "--format", "onnx", "--quantize", "int8"],
         ["--quantize", "None for a sparse recipe", "without --quantize"]),
        (["--recipe", "splade/256"], ["/topK instead"]),
        (["--recipe", "splade/int8", "--format", "onnx"], ["/topK instead"]),
        (["--recipe", "splade/top0"], ["positive number of weights"]),
    ],
)  # fmt: skip
def test_cli_refusals_are_one_line_and_write_nothing(mlm_dirs, tmp_path, args, fragments):
    r = poolkit("export", "-m", str(mlm_dirs["bert_dense"]), "-o", "out", *args, cwd=tmp_path)
    one_error_line(r, 2, *fragments)
    assert not (tmp_path / "out").exists()


def test_refusals_come_before_the_model_loads_or_anything_is_written(tiny_dirs, tmp_path):
    with pytest.raises(pk.InputError, match=r"`quantize`.*sparse recipe") as e:
        pk.export(tmp_path / "no-such-model", tmp_path / "out", recipe="splade", format="onnx",
                  quantize="int8")  # fmt: skip
    assert "\n" not in str(e.value)
    for fmt in ("sentence-transformers", "onnx"):
        with pytest.raises(pk.InputError, match=r"masked-language-model head.*BertModel") as e:
            pk.export(tiny_dirs["bert_plain"], tmp_path / "out", recipe="splade", format=fmt)
        assert "\n" not in str(e.value)
    r = poolkit("export", "-m", str(tiny_dirs["bert_plain"]), "-o", "out", "--recipe",
                "splade_sum", cwd=tmp_path)  # fmt: skip
    one_error_line(r, 2, "masked-language-model head", "ForMaskedLM")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_from_compare_takes_the_best_row_a_folder_holds(mlm_dirs, tmp_path) -> None:
    """``compare --task retrieval`` with sparse and BM25 rows, then ``export --from-compare``:
    a BM25 row needs no model, so the best sparse row is exported and the card says why."""
    source = str(mlm_dirs["bert_dense"])
    r = poolkit("compare", str(Path(__file__).parent / "data" / "stsb-images-retrieval"), "--task", "retrieval",
                "--model", source, "--recipes", "splade", "splade_sum/top8", "bm25",
                "--json", "r.json", "--quiet", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    rows = json.loads((tmp_path / "r.json").read_text())["results"]
    rank, best = next((k, row) for k, row in enumerate(rows, 1) if row["recipe"] != "bm25")
    r = poolkit("export", "-m", source, "--from-compare", "r.json", "-o", "out", "--quiet",
                cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    out = tmp_path / "out"
    record = json.loads((out / "poolkit-export.json").read_text())
    assert record["recipe"] == best["recipe"] and record["choice"]["rank"] == rank
    if rank > 1:  # BM25 above it (on random weights, always)
        card = (out / "README.md").read_text()
        assert f"row {rank}, the best a model folder holds (the rows above it are BM25" in card
    want = pk.embed(TEXTS, model=source, recipe=best["recipe"])
    np.testing.assert_allclose(pk.embed(TEXTS, model=out).toarray(), want.toarray(), atol=TOL)


def test_an_unknown_format_is_refused_naming_the_ones_there_are(mlm_dirs, tmp_path) -> None:
    with pytest.raises(pk.InputError, match="'sentence-transformers' or 'onnx'") as e:
        pk.export(mlm_dirs["bert_dense"], tmp_path / "out", recipe="splade", format="openvino")
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()
