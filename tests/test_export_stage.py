"""``poolkit export`` of a recipe with an output stage (``/DIMS``, ``/PRECISION``).

The ONNX graph, run on bare onnxruntime and tokenizers, returns the stored form
``poolkit.embed`` gives (same dtype, same bytes); the sentence-transformers folder of a
``/DIMS`` recipe gives ``SentenceTransformer(dir).encode`` = ``poolkit.embed``. The fast
tests use the tiny CLS-trained BERT (hidden 32, normalised); the slow ones the real
all-MiniLM-L6-v2 on STS-B sentences, the recipes of issue #37.

Stored codes are compared byte for byte. The transformer in ONNX Runtime and in torch
agree to ~1e-7, not to the bit, so a float that lies on an int8 bucket edge (or at 0 for
a sign bit) may land one code apart: :func:`assert_same_stored` allows exactly that and
nothing else, checking that each differing value's float is on the edge.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from clitools import run_cli

import poolkit as pk
from poolkit.output import Calibration

TEXTS = [
    "a man plays a guitar",
    "hello",
    "a much longer sentence about nothing at all",
    "Zwei Hunde spielen im Schnee.",
    "prices rose 3.5% in 2024",
]
CALIBRATION = [f"calibration text {i} about {w}" for i, w in enumerate("abcdefghijklmnop")]
EDGE = 1e-5  # "on the edge": this close to a bucket edge (int8) or to 0 (sign bits)


def run_onnx(folder: Path, texts: list[str]) -> np.ndarray:
    """The folder as a server runs it: onnxruntime and tokenizers, nothing of poolkit."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    enc = tok.encode_batch(texts)
    feed = {
        "input_ids": [e.ids for e in enc],
        "attention_mask": [e.attention_mask for e in enc],
        "token_type_ids": [e.type_ids for e in enc],
    }
    feed = {k: np.array(v, dtype=np.int64) for k, v in feed.items() if k in names}
    return session.run(["sentence_embedding"], feed)[0]


def assert_same_stored(got, want, floats, recipe: str, calibration: Calibration | None) -> None:
    """``got`` = ``want`` (dtype, shape, bytes) but for values one code apart whose float
    (``floats``: embed's truncated float vectors) sits on that code's edge."""
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape)
    if "binary" in recipe:
        dims = floats.shape[1]
        gbits, wbits = (np.unpackbits(unpacked(a), axis=1) for a in (got, want))
        apart = gbits[:, :dims] != wbits[:, :dims]
        assert (np.abs(floats[apart]) < EDGE).all(), floats[apart]
        assert not gbits[:, dims:].any()  # the last byte's padding bits are zero
    else:
        diff = got.astype(np.int16) - want.astype(np.int16)
        assert np.abs(diff).max() <= 1
        steps = np.where(calibration.steps > 0, calibration.steps, 1)
        place = (floats - calibration.starts) / steps
        edge = (np.abs(place - np.round(place)) * steps)[diff != 0]  # in value
        assert (edge < EDGE).all(), edge


def unpacked(stored: np.ndarray) -> np.ndarray:
    """Packed sign bits as uint8 bytes (binary is stored minus 128)."""
    return stored.view(np.uint8) ^ np.uint8(0x80) if stored.dtype == np.int8 else stored


@pytest.fixture
def model(tiny_dirs, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("POOLKIT_CACHE", str(tmp_path / "cache"))
    return tiny_dirs["bert_cls"]


@pytest.mark.parametrize("recipe", ["cls/16/int8", "mean/20/binary", "cls/24/uint8",
                                    "cls/12/ubinary", "cls/16/float16", "cls/8"])  # fmt: skip
def test_onnx_graph_returns_embeds_stored_form(recipe, model, tmp_path):
    cal = CALIBRATION if "int8" in recipe else None
    out = pk.export(model, tmp_path / "x", recipe=recipe, format="onnx", calibration=cal)
    got = run_onnx(out, TEXTS)
    want, stats = pk.embed(TEXTS, model=model, recipe=recipe, calibration=cal, return_stats=True)
    if want.dtype.kind == "f":
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), atol=1e-6)
    else:
        floats = pk.embed(TEXTS, model=model, recipe=recipe.rsplit("/", 1)[0])
        ranges = next(iter(stats.calibration.values()), None)
        assert_same_stored(got, want, floats, recipe, ranges)
    record = json.loads((out / "poolkit-export.json").read_text())
    stage = record["onnx"]["output_stage"]
    assert stage["dtype"] == want.dtype.name and stage["width"] == want.shape[1]
    if cal is not None:  # the ranges the graph holds are the ones embed used
        assert Calibration.from_json(stage["calibration"]) == ranges


def test_cli_export_and_embed_take_the_same_calibrate_file(model, tmp_path):
    (tmp_path / "cal.txt").write_text("\n".join(CALIBRATION) + "\n")
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n")
    recipe = "cls/16/int8"
    r = run_cli(["export", "--model", str(model), "-o", "g", "--format", "onnx", "--recipe",
                 recipe, "--calibrate", "cal.txt", "--quiet"], cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run_cli(["embed", "in.txt", "--model", str(model), "--recipe", recipe,
                 "--calibrate", "cal.txt", "-o", "x.npy"], cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    want = np.load(tmp_path / "x.npy")
    floats = pk.embed(TEXTS, model=model, recipe="cls/16")
    record = json.loads((tmp_path / "x.npy.poolkit.json").read_text())
    ranges = Calibration.from_json(next(iter(record["columns"].values()))["calibration"])
    assert_same_stored(run_onnx(tmp_path / "g", TEXTS), want, floats, recipe, ranges)
    # --ranges: the record embed wrote gives the same graph output
    r = run_cli(["export", "--model", str(model), "-o", "g2", "--format", "onnx", "--recipe",
                 recipe, "--ranges", "x.npy.poolkit.json", "--quiet"], cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert np.array_equal(run_onnx(tmp_path / "g2", TEXTS), run_onnx(tmp_path / "g", TEXTS))


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--format", "onnx", "--recipe", "cls/16/int8"], "--calibrate FILE"),
        (["--recipe", "cls/16/binary"], "--format onnx"),
        (["--format", "onnx", "--recipe", "cls/16/binary", "--calibrate", "cal.txt"],
         "without int8/uint8"),
        (["--format", "onnx", "--recipe", "cls/64"], "at most"),
    ],
)  # fmt: skip
def test_cli_refusals_are_one_line_and_write_nothing(args, fragment, model, tmp_path):
    (tmp_path / "cal.txt").write_text("\n".join(CALIBRATION) + "\n")
    r = run_cli(["export", "--model", str(model), "-o", "out", *args], cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    err = r.stderr.decode().strip()
    assert fragment in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("recipe", ["cls/16", "cls/raw/16"])
def test_sentence_transformers_folder_records_truncate_dim(recipe, model, tmp_path):
    from sentence_transformers import SentenceTransformer

    out = pk.export(model, tmp_path / "st", recipe=recipe)
    config = json.loads((out / "config_sentence_transformers.json").read_text())
    assert config["truncate_dim"] == 16
    got = SentenceTransformer(str(out), device="cpu").encode(TEXTS)
    want = pk.embed(TEXTS, model=model, recipe=recipe)
    assert got.shape == want.shape == (len(TEXTS), 16)
    np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["mean/128/int8", "mean/256/binary"])
def test_minilm_onnx_stored_form(recipe, minilm_dir, sts_dev, tmp_path):
    texts, cal = sts_dev[:200], sts_dev[200:600]
    cal = cal if "int8" in recipe else None
    out = pk.export(minilm_dir, tmp_path / "g", recipe=recipe, format="onnx", calibration=cal)
    want, stats = pk.embed(texts, model=minilm_dir, recipe=recipe, calibration=cal,
                           return_stats=True)  # fmt: skip
    floats = pk.embed(texts, model=minilm_dir, recipe=recipe.rsplit("/", 1)[0])
    assert_same_stored(run_onnx(out, texts), want, floats, recipe,
                       next(iter(stats.calibration.values()), None))  # fmt: skip


@pytest.mark.slow
def test_minilm_sentence_transformers_mean_256(minilm_dir, sts_dev, tmp_path):
    from sentence_transformers import SentenceTransformer

    texts = sts_dev[:200]
    out = pk.export(minilm_dir, tmp_path / "st", recipe="mean/256")
    got = SentenceTransformer(str(out), device="cpu").encode(texts)
    np.testing.assert_allclose(got, pk.embed(texts, model=minilm_dir, recipe="mean/256"),
                               atol=1e-6)  # fmt: skip


def test_compare_prints_the_export_command_of_an_int8_row_and_it_runs(model, tmp_path):
    import html

    data = Path(__file__).parent / "data" / "stsb-dev-sample.csv"
    r = run_cli(["compare", str(data), "--task", "sts", "--model", str(model), "--strategies",
                 "cls", "--dims", "16", "--precision", "int8", "--bootstrap", "0", "--json",
                 "r.json", "--report", "page.html"], cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    page = html.unescape((tmp_path / "page.html").read_text())
    command = f"poolkit export {model} -o exported --recipe cls/16/int8 --format onnx "
    command += "--ranges r.json"
    assert command in page
    r = run_cli(command.split()[1:], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads((tmp_path / "r.json").read_text())["results"]
    (row,) = [row for row in rows if row["recipe"] == "cls/16/int8"]
    record = json.loads((tmp_path / "exported" / "poolkit-export.json").read_text())
    held = Calibration.from_json(record["onnx"]["output_stage"]["calibration"])
    assert held == Calibration.from_json(row["ranges"])
