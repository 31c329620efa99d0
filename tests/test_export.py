"""``poolkit export``: the folders it writes give ``poolkit.embed``'s vectors elsewhere.

Sentence-transformers folders are loaded with ``SentenceTransformer``; ONNX folders are run
with ``onnxruntime`` and ``tokenizers`` alone (here in-process; ``test_export_runtime.py``
does it in a fresh virtualenv without poolkit or torch). The reference is always
``poolkit.embed`` on the source model with the same recipe, to 1e-5.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from clitools import command, one_error_line, poolkit
from equality import RUNTIME_BOUND

import poolkit as pk

pytestmark = pytest.mark.slow

TOL = RUNTIME_BOUND  # docs/equality.md: another runtime against torch
EXTRA = [
    "hello",
    "Zwei Hunde spielen im Schnee. 東京は日本の首都です。",
    "a [SEP] typed in the middle of a text",
    " ".join(["pooling turns token vectors into one vector per text"] * 60),  # truncated
]


@pytest.fixture(scope="module")
def texts(sts_dev: list[str]) -> list[str]:
    return sts_dev[:24] + EXTRA


@pytest.fixture(scope="module")
def models(minilm_dir: Path, tiny_dirs: dict[str, Path]) -> dict[str, Path]:
    """all-MiniLM-L6-v2 (mean, normalised) and the tiny CLS-trained BERT (cls, normalised)."""
    return {"minilm": minilm_dir, "tiny_cls": tiny_dirs["bert_cls"]}


def reference(texts: list[str], model: Path, recipe: str | None) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the long text is truncated on purpose
        return pk.embed(texts, model=model, recipe=recipe)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- sentence-transformers folders -------------------------------------------------------

ST_RECIPES = {
    "minilm": [
        "cls",
        "mean",
        "max",
        "mean_sqrt_len",
        "weighted_mean",
        "last",
        "cls+mean",
        "cls+max+mean+mean_sqrt_len+weighted_mean+last",
        "mean/raw",
    ],
    "tiny_cls": [None, "mean", "max", "cls+mean", "cls/raw"],
}


@pytest.mark.parametrize(("name", "recipe"), [(m, r) for m, rs in ST_RECIPES.items() for r in rs])
def test_sentence_transformers_folder_equals_embed(name, recipe, models, texts, tmp_path_factory):
    from sentence_transformers import SentenceTransformer

    model = models[name]
    out = tmp_path_factory.mktemp("st") / "export"
    assert pk.export(model, out, recipe=recipe) == out
    got = SentenceTransformer(str(out), device="cpu").encode(texts, batch_size=8)
    want = reference(texts, model, recipe)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    # Transformer files copied byte for byte; the pipeline as the recipe says.
    for f in ("config.json", "model.safetensors", "tokenizer.json", "vocab.txt"):
        assert digest(out / f) == digest(model / f), f
    modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads((out / "modules.json").read_text())]
    normalise = recipe is None or not recipe.endswith("/raw")
    assert modules == ["Transformer", "Pooling"] + (["Normalize"] if normalise else [])
    record = json.loads((out / "poolkit-export.json").read_text())
    assert record["recipe"] == str(pk.Recipe.parse(recipe or pk.model_info(model).pooling))
    assert record["output_dim"] == want.shape[1] and record["normalize"] is normalise
    card = (out / "README.md").read_text()
    assert record["recipe"] in card and "SentenceTransformer(" in card
    assert ("intended pooling" if recipe is None else "given with --recipe") in card


def test_inspect_and_embed_read_the_folder_back(models, tmp_path, texts):
    out = tmp_path / "cls_mean"
    pk.export(models["minilm"], out, recipe="cls+mean")
    info = pk.model_info(out)
    assert info.pooling == "cls+mean" and info.normalize
    assert "exported by poolkit export as cls+mean" in info.pooling_source
    np.testing.assert_allclose(
        reference(texts, out, None), reference(texts, models["minilm"], "cls+mean"), atol=TOL
    )
    r = poolkit("inspect", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    line = next(x for x in r.stdout.decode().splitlines() if x.startswith("pooling"))
    assert "cls+mean" in line and "exported by poolkit export" in line and "--recipe" in line
    (tmp_path / "t.txt").write_text("a man plays\nhello\n", encoding="utf-8")
    r = poolkit("embed", "t.txt", "-o", "v.npy", "--model", str(out), cwd=tmp_path)
    assert r.returncode == 0 and "exported by poolkit export as cls+mean" in r.stderr.decode()
    np.testing.assert_allclose(
        np.load(tmp_path / "v.npy"),
        reference(["a man plays", "hello"], models["minilm"], "cls+mean"),
        atol=TOL,
    )


# --- ONNX folders -------------------------------------------------------------------------

ONNX_RECIPES = ["mean", "cls", "max", "cls+mean", "mean_no_special", "mean@last4"]
LAYER_MIX = {"minilm": "mean@last4", "tiny_cls": "mean@first_last"}  # the tiny model has 2 layers


def run_onnx(folder: Path, texts: list[str], side: str, one_by_one: bool = False) -> np.ndarray:
    """The folder run as a deployment would: onnxruntime + tokenizers, nothing of poolkit."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_padding(
        direction=side, pad_id=tok.padding["pad_id"], pad_token=tok.padding["pad_token"]
    )
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    out = []
    for batch in [[t] for t in texts] if one_by_one else [texts]:
        enc = tok.encode_batch(batch)
        feed = {
            "input_ids": [e.ids for e in enc],
            "attention_mask": [e.attention_mask for e in enc],
            "token_type_ids": [e.type_ids for e in enc],
        }
        feed = {k: np.array(v, dtype=np.int64) for k, v in feed.items() if k in names}
        out.append(session.run(["sentence_embedding"], feed)[0])
    return np.concatenate(out)


@pytest.mark.parametrize("name", ["minilm", "tiny_cls"])
@pytest.mark.parametrize("recipe", ONNX_RECIPES)
def test_onnx_folder_equals_embed(name, recipe, models, texts, tmp_path):
    model = models[name]
    recipe = LAYER_MIX[name] if recipe == "mean@last4" else recipe
    out = tmp_path / "onnx"
    pk.export(model, out, recipe=recipe, format="onnx")
    assert sorted(p.name for p in out.iterdir()) == [
        "README.md",
        "model.onnx",
        "poolkit-export.json",
        "tokenizer.json",
    ]
    want = reference(texts, model, recipe)
    # a padded batch either side, and each text alone
    for side, alone in (("right", False), ("left", False), ("right", True)):
        got = run_onnx(out, texts, side, alone)
        np.testing.assert_allclose(got, want, atol=TOL, rtol=0, err_msg=f"{side} {alone}")
    record = json.loads((out / "poolkit-export.json").read_text())
    assert record["recipe"] == recipe and record["output_dim"] == want.shape[1]
    assert record["onnx"]["output"] == "sentence_embedding" and record["onnx"]["opset"] == 17
    assert record["onnx"]["inputs"] == ["input_ids", "attention_mask", "token_type_ids"]
    assert record["agreement"]["fp32"]["max_abs_diff"] <= 1e-4
    assert record["versions"]["onnxruntime"] and record["versions"]["poolkit"] == pk.__version__


@pytest.mark.parametrize("name", ["gpt2", "gpt2_left"])
def test_onnx_folder_of_a_decoder(name, tiny_dirs, texts, tmp_path):
    """A causal LM: poolkit appends EOS for ``last`` and counts positions from the first
    real token; the folder's tokenizer and graph do the same, whatever the padding side."""
    model = tiny_dirs[name]
    for recipe in ("last", "mean"):
        out = tmp_path / recipe
        pk.export(model, out, recipe=recipe, format="onnx")
        want = reference(texts, model, recipe)
        for side in ("right", "left"):
            np.testing.assert_allclose(run_onnx(out, texts, side), want, atol=TOL, rtol=0)
    r = poolkit("export", str(model), "-o", "st", cwd=tmp_path)
    one_error_line(r, 2, "MODEL", "encoder", "--format onnx")
    assert not (tmp_path / "st").exists()


def test_int8_too_far_is_refused_and_writes_nothing(models, tmp_path, monkeypatch):
    # No int8 graph reaches a mean cosine above 1: the refusal path, word for word.
    import poolkit.backends.onnx

    monkeypatch.setattr(poolkit.backends.onnx, "INT8_MIN_COS", 1.01)
    out = tmp_path / "int8"
    with pytest.raises(pk.ExportError) as e:
        pk.export(models["tiny_cls"], out, recipe="mean", format="onnx", quantize="int8")
    assert re.fullmatch(
        r"Expected the int8 graph's vectors to have mean cosine at least 1\.01 with "
        r"poolkit\.embed's, but they have [01]\.\d{4}\. Nothing was written\. Export without "
        r"`quantize`\.",
        str(e.value),
    ), str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_onnx_int8_folder(models, texts, tmp_path):
    model = models["minilm"]
    out = tmp_path / "int8"
    pk.export(model, out, recipe="mean", format="onnx", quantize="int8")
    record = json.loads((out / "poolkit-export.json").read_text())
    assert record["onnx"]["quantize"] == "int8"
    # The recorded agreement, recomputed here: CHECK_TEXTS run by onnxruntime as a deployment
    # would (right- and left-padded, one at a time) against poolkit.embed (the gate only
    # says it was >= 0.97; a wrong figure or the wrong graph checked shows here).
    from poolkit.deploy import CHECK_TEXTS

    check = list(CHECK_TEXTS)
    fp32 = reference(check, model, "mean")
    runs = [run_onnx(out, check, "right"), run_onnx(out, check, "left"),
            run_onnx(out, check, "right", one_by_one=True)]  # fmt: skip
    cosines = np.concatenate([(r * fp32).sum(-1) / np.linalg.norm(r, axis=-1)
                              / np.linalg.norm(fp32, axis=-1) for r in runs])  # fmt: skip
    int8 = record["agreement"]["int8"]
    assert int8["texts"] == len(check)
    assert abs(int8["mean_cosine"] - cosines.mean()) < 1e-4, (int8, cosines.mean())
    assert abs(int8["min_cosine"] - cosines.min()) < 1e-4, (int8, cosines.min())
    assert not (out / "model-fp32.onnx").exists()
    got = run_onnx(out, texts, "right")
    want = reference(texts, model, "mean")
    cos = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    assert cos.mean() >= 0.97 and not np.allclose(got, want, atol=1e-5)  # really quantised
    # close to poolkit's own int8 backend (int8 vectors depend a little on the batch)
    from poolkit.encoder import Encoder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the long text is truncated on purpose
        encoder = Encoder(model, backend="onnx", quantize="int8")
        backend = pk.embed(texts, model=encoder, recipe="mean")
    cos = (got * backend).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(backend, axis=-1)
    assert cos.min() >= 0.97


# --- refusals, through the real command line ---------------------------------------------


@pytest.mark.parametrize(
    ("recipe", "fragment"),
    [
        ("min", "the strategy min"),
        ("mean_no_special", "cannot drop special tokens"),
        ("mean@last4", "the layer mix @last4"),
        ("mean+cls", "the order mean+cls"),
    ],
)
def test_sentence_transformers_refuses_what_pooling_cannot_express(
    recipe, fragment, minilm_dir, tmp_path
):
    r = poolkit("export", str(minilm_dir), "-o", "out", "--recipe", recipe, cwd=tmp_path)
    one_error_line(r, 2, fragment, "--format onnx", "--recipe")
    assert list(tmp_path.iterdir()) == []


def test_cli_refusals_leave_nothing(minilm_dir, tmp_path):
    m = str(minilm_dir)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    r = poolkit("export", m, "-o", "taken", cwd=tmp_path)
    one_error_line(r, 2, "-o", "does not exist yet", "--overwrite")
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["keep.txt"]
    r = poolkit("export", m, "-o", "x", "--quantize", "int8", cwd=tmp_path)
    one_error_line(r, 2, "--quantize", "onnx")
    (tmp_path / "r.json").write_text("{}")
    r = poolkit("export", m, "-o", "x", "--recipe", "cls", "--from-compare", "r.json", cwd=tmp_path)
    one_error_line(r, 2, "--recipe", "--from-compare")
    r = poolkit("export", m, "-o", "x", "--from-compare", "r.json", cwd=tmp_path)
    one_error_line(r, 2, "--from-compare", "no rows")
    r = poolkit("export", m, "-o", "x", "--recipe", "word:first", "--format", "onnx", cwd=tmp_path)
    one_error_line(r, 2, "--recipe", "sequence-level")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json", "taken"]


def test_overwrite_replaces_only_when_complete(minilm_dir, tmp_path):
    out = tmp_path / "out"
    pk.export(minilm_dir, out, recipe="cls")
    with pytest.raises(pk.InputError, match="overwrite=True"):
        pk.export(minilm_dir, out, recipe="max")
    with pytest.raises(pk.InputError, match="order"):  # a refused recipe keeps the old folder
        pk.export(minilm_dir, out, recipe="mean+cls", overwrite=True)
    assert json.loads((out / "poolkit-export.json").read_text())["recipe"] == "cls"
    pk.export(minilm_dir, out, recipe="max", overwrite=True)
    assert json.loads((out / "poolkit-export.json").read_text())["recipe"] == "max"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary left


def test_full_disk_is_one_line_and_leaves_nothing(minilm_dir, tmp_path):
    import resource
    import subprocess

    def limit() -> None:  # writes past 1 MB fail with EFBIG (the model file is 90 MB)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, resource.RLIM_INFINITY))

    r = subprocess.run(
        command("export", str(minilm_dir), "-o", "out"),
        cwd=tmp_path,
        capture_output=True,
        timeout=300,
        preexec_fn=limit,
    )
    line = one_error_line(r, 1, "out: cannot write it (file larger than")
    assert "Free some space" in line
    assert list(tmp_path.iterdir()) == []


def test_a_dense_head_goes_into_both_formats(tiny_dirs, tmp_path):
    """A pipeline with a Dense module after pooling: both exported folders give the source
    pipeline's own vectors (sentence-transformers on the source folder is the reference)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules.dense import Dense

    src = tmp_path / "dense"
    base = SentenceTransformer(str(tiny_dirs["bert_cls"]), device="cpu")
    modules = list(base)
    modules.insert(2, Dense(32, 16))
    SentenceTransformer(modules=modules, device="cpu").save(str(src))
    texts = ["a man plays a guitar", "hello", "a much longer sentence about nothing at all"]
    want = SentenceTransformer(str(src), device="cpu").encode(texts)
    assert want.shape == (3, 16)
    # ONNX: the Dense is inside the graph, for left and right padding, one text and many.
    r = poolkit("export", str(src), "-o", "onnx", "--format", "onnx", "--quiet", cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    for side in ("right", "left"):
        np.testing.assert_allclose(run_onnx(tmp_path / "onnx", texts, side), want, atol=TOL)
    np.testing.assert_allclose(run_onnx(tmp_path / "onnx", texts, "right", True), want, atol=TOL)
    # sentence-transformers: the head folder is kept, byte for byte.
    pk.export(src, tmp_path / "st")
    dense = [
        m["path"]
        for m in json.loads((tmp_path / "st" / "modules.json").read_text())
        if m["type"].endswith("Dense")
    ]
    assert dense == ["2_Dense"]
    np.testing.assert_allclose(
        SentenceTransformer(str(tmp_path / "st"), device="cpu").encode(texts), want, atol=TOL
    )
    # Both records give the width the folder gives (the Dense's, not the pooled one's).
    for folder in ("onnx", "st"):
        record = json.loads((tmp_path / folder / "poolkit-export.json").read_text())
        assert record["output_dim"] == want.shape[1] == 16
    # A recipe whose width the Dense cannot take is refused before anything is exported.
    r = poolkit("export", str(src), "-o", "wide", "--format", "onnx", "--recipe", "cls+mean",
                cwd=tmp_path)  # fmt: skip
    one_error_line(r, 2, "Dense")
    assert not (tmp_path / "wide").exists()


# --- from a compare run ------------------------------------------------------------------


def test_export_the_top_row_of_compare(minilm_dir, tmp_path):
    from testdata import fixture

    r = poolkit(
        "compare",
        str(fixture("stsb-dev-sample.csv")),
        "--task",
        "sts",
        "--model",
        str(minilm_dir),
        "--strategies",
        "mean",
        "cls",
        "max",
        "--bootstrap",
        "200",
        "--json",
        "results.json",
        "--quiet",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr.decode()
    doc = json.loads((tmp_path / "results.json").read_text())
    top = doc["results"][0]
    r = poolkit(
        "export",
        str(minilm_dir),
        "--from-compare",
        "results.json",
        "-o",
        "out",
        "--format",
        "onnx",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr.decode()
    record = json.loads((tmp_path / "out" / "poolkit-export.json").read_text())
    assert record["recipe"] == top["recipe"]
    assert record["choice"]["value"] == top["spearman"] and record["choice"]["rows"] == 3
    card = (tmp_path / "out" / "README.md").read_text()
    assert f"spearman {top['spearman']:.4f}" in card and "the top row of 3" in card
    texts = ["a man plays a guitar", "hello"]
    np.testing.assert_allclose(
        run_onnx(tmp_path / "out", texts, "left"),
        reference(texts, minilm_dir, top["recipe"]),
        atol=TOL,
    )
    # a compare file of another model is refused
    other = dict(doc, model=str(tmp_path))
    (tmp_path / "other.json").write_text(json.dumps(other))
    r = poolkit("export", str(minilm_dir), "--from-compare", "other.json", "-o", "x", cwd=tmp_path)
    one_error_line(r, 2, "--from-compare", "compared")
