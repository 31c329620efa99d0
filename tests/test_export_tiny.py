"""``poolkit export`` end to end in the fast set, on the tiny CLS-trained BERT.

``test_export.py`` checks every recipe and both formats on the real model (slow); this file
runs the same path in a few seconds (tests/tiny_models.py: 2 layers, hidden 32), so that the
README's test command still covers ``poolkit.deploy``, ``poolkit export`` and the per-token
int8 rewrite: the sentence-transformers folder and the ONNX graph give ``poolkit.embed``'s
vectors, the int8 graph stays close to them and records its agreement.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from clitools import run_cli
from equality import RUNTIME_BOUND

import poolkit as pk

TEXTS = ["a man plays a guitar", "hello", "a much longer sentence about nothing at all"]
TOL = RUNTIME_BOUND  # docs/equality.md: another runtime against torch


def _run_onnx(folder: Path, texts: list[str]) -> np.ndarray:
    """The folder as a server runs it: onnxruntime and tokenizers, nothing of poolkit."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_padding(pad_id=tok.padding["pad_id"], pad_token=tok.padding["pad_token"])
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


@pytest.fixture
def model(tiny_dirs, tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("POOLKIT_CACHE", str(tmp_path / "cache"))
    return tiny_dirs["bert_cls"]


def test_sentence_transformers_folder_gives_embeds_vectors(model, tmp_path):
    from sentence_transformers import SentenceTransformer

    out = pk.export(model, tmp_path / "st", recipe="cls+mean")
    want = pk.embed(TEXTS, model=model, recipe="cls+mean")
    got = SentenceTransformer(str(out), device="cpu").encode(TEXTS)
    np.testing.assert_allclose(got, want, atol=TOL)
    assert json.loads((out / "poolkit-export.json").read_text())["recipe"] == "cls+mean"
    assert "cls+mean" in (out / "README.md").read_text()
    with pytest.raises(ValueError, match="format='onnx'"):
        pk.export(model, tmp_path / "refused", recipe="min")
    assert not (tmp_path / "refused").exists()


def test_onnx_folder_and_its_int8_twin_through_the_cli(model, tmp_path):
    recipe = "mean_no_special"
    result = run_cli(["export", str(model), "-o", str(tmp_path / "onnx"), "--format", "onnx",
                      "--recipe", recipe, "--quiet"], cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr
    want = pk.embed(TEXTS, model=model, recipe=recipe)
    np.testing.assert_allclose(_run_onnx(tmp_path / "onnx", TEXTS), want, atol=TOL)

    out = pk.export(model, tmp_path / "int8", recipe=recipe, format="onnx", quantize="int8")
    got = _run_onnx(out, TEXTS)
    cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() > 0.97, cosine
    record = json.loads((out / "poolkit-export.json").read_text())
    assert record["onnx"]["quantize"] == "int8" and record["recipe"] == recipe
    assert record["agreement"]["int8"]["mean_cosine"] > 0.97


def test_from_compare_skips_document_rows_no_folder_can_carry(minilm_dir, tmp_path):
    """A chunked or windowed document row on top (compare --chunk-tokens): the best row a
    model folder holds is exported, and the card says which row that was and why."""
    from poolkit.deploy.card import choice_text, read_compare
    from poolkit.model_folder import resolve_model

    rows = [
        {"recipe": "mean", "documents": "naive tokens:64", "ndcg_at_10": 0.41},
        {"recipe": "mean", "documents": "window", "ndcg_at_10": 0.29},
        {"recipe": "mean_no_special", "documents": None, "ndcg_at_10": 0.26},
        {"recipe": "mean", "intended": True, "ndcg_at_10": 0.25},
    ]
    doc = {"model": str(minilm_dir), "task": "retrieval", "metric": "ndcg_at_10",
           "results": rows}  # fmt: skip
    (tmp_path / "r.json").write_text(json.dumps(doc))
    recipe, choice = read_compare(tmp_path / "r.json", resolve_model(str(minilm_dir)))
    assert str(recipe) == "mean_no_special" and choice["rank"] == 3 and choice["value"] == 0.26
    text = choice_text(choice)
    assert "row 3, the best a model folder holds" in text and "0.2600" in text
    doc["results"] = rows[2:]  # no document row: the top row, as before
    (tmp_path / "r.json").write_text(json.dumps(doc))
    recipe, choice = read_compare(tmp_path / "r.json", resolve_model(str(minilm_dir)))
    assert choice["rank"] == 1 and "the top row of 2" in choice_text(choice)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_export_takes_the_model_as_every_command_does(model, tmp_path):
    from clitools import one_error_line, poolkit

    m = str(model)
    # The same -o in two places: the model card names the folder.
    for argv, cwd in ((["-m", m], "flag"), ([m], "positional")):  # positional: old spelling
        (tmp_path / cwd).mkdir()
        r = poolkit("export", *argv, "-o", "out", "--recipe", "cls", "--quiet", cwd=tmp_path / cwd)
        assert r.returncode == 0, r.stderr.decode()
    flag, positional = _files(tmp_path / "flag" / "out"), _files(tmp_path / "positional" / "out")
    assert "model.safetensors" in flag and "poolkit-export.json" in flag
    assert flag == positional
    r = poolkit("export", "-m", m, "./other", "-o", "both", cwd=tmp_path)
    line = one_error_line(r, 2)
    assert line == (
        f"poolkit: error: Expected --model to be given once, but got both --model {m} "
        "and MODEL ./other. Drop MODEL (the old spelling).\n"
    )
    assert not (tmp_path / "both").exists()
