"""`poolkit.diagnose` against vectors sentence-transformers made (the reference), on tiny
models of the mpnet architecture (a stand-in for all-mpnet-base-v2, whose weights are not
installed here) and bert_dense (named prompts kept out of pooling); the real MiniLM runs in
test_diagnose_minilm.py (slow)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clitools import one_error_line, poolkit
from tiny_models import MAX_SEQ, build_family

import poolkit as pk
from poolkit.diagnosis.sources import read_vectors

TEXTS = [
    "John works at Google in London.",
    "A cat sat on the mat, and the dog barked at it.",
    "Pooling turns token vectors into one vector per text.",
    "The quick brown fox jumps over the lazy dog.",
    "query: how do cats sleep? passage: Cats sleep sixteen hours a day.",
    "Emoji and numbers 12345 and URLs like example.com/a?b=c.",
    "hello",
    "Zwei Hunde spielen im Schnee, the cat watches the dog and the fox again and again.",
]
# sentence-transformers' Pooling mode -> poolkit's strategy name
MODES = {"cls": "cls", "mean": "mean", "max": "max", "mean_sqrt_len_tokens": "mean_sqrt_len",
         "weightedmean": "weighted_mean", "lasttoken": "last"}  # fmt: skip


@pytest.fixture(scope="module")
def mpnet(tmp_path_factory: pytest.TempPathFactory):
    return build_family("mpnet", tmp_path_factory.mktemp("diag") / "mpnet")


@pytest.fixture(scope="module")
def transformer(mpnet):
    from sentence_transformers.base.modules import Transformer

    return Transformer(str(mpnet), max_seq_length=MAX_SEQ)


def st_vectors(transformer, mode: str, normalize: bool, **encode) -> np.ndarray:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

    modules = [transformer, Pooling(32, pooling_mode=mode)] + ([Normalize()] if normalize else [])
    st = SentenceTransformer(modules=modules, device="cpu")
    return st.encode(TEXTS, convert_to_numpy=True, **encode)


def names(d) -> set[str]:
    """The recipe of the found candidate and of those indistinguishable from it."""
    return {str(a.candidate.recipe) for a in (d.best, *d.equivalent)}


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("mode", list(MODES))
def test_each_sentence_transformers_pooling_mode_is_named(mpnet, transformer, mode, normalize):
    vectors = st_vectors(transformer, mode, normalize)
    d = pk.diagnose(TEXTS, vectors, model=mpnet)
    want = f"{MODES[mode]}/{'l2' if normalize else 'raw'}"
    assert d.best is not None and d.best.fraction >= 0.99, d.verdict
    assert want in names(d), (want, names(d))
    # the model's Dense/LayerNorm were not in this pipeline: the diagnosis says so
    assert d.best.candidate.head is False
    assert "Dense/LayerNorm" in d.verdict and d.verdict.startswith("MISMATCH")
    if mode == "cls":
        assert "these are CLS vectors; the model was trained with mean" in d.verdict
        assert d.fix == "--recipe mean"


def test_the_models_own_pipeline_is_ok_and_truncate_dim_is_a_prefix(mpnet):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(mpnet), device="cpu")
    d = pk.diagnose(TEXTS, st.encode(TEXTS), model=mpnet)
    assert d.verdict.startswith("OK: these are the model's intended vectors"), d.verdict
    assert d.best.matched == len(TEXTS) and d.fix == ""
    cut = pk.diagnose(TEXTS, st.encode(TEXTS, truncate_dim=16), model=mpnet)
    assert str(cut.best.candidate.recipe) == "mean/raw/16" and cut.best.candidate.head
    assert cut.verdict.startswith("OK: the model's intended vectors"), cut.verdict


def test_a_named_prompt_is_found_and_named(tmp_path):
    from sentence_transformers import SentenceTransformer

    folder = build_family("bert_dense", tmp_path / "bert_dense")  # prompts kept out of pooling
    st = SentenceTransformer(str(folder), device="cpu")
    d = pk.diagnose(TEXTS, st.encode(TEXTS, prompt_name="query"), model=folder)
    assert d.best is not None and d.best.candidate.prompt == "query", d.verdict
    assert str(d.best.candidate.recipe) == "mean/l2"
    assert "made with the prompt 'query'" in d.verdict and d.fix == "--prompt ''"
    plain = pk.diagnose(TEXTS, st.encode(TEXTS), model=folder)
    assert plain.verdict.startswith("OK"), plain.verdict


def test_vectors_of_another_model_match_no_candidate(mpnet, tmp_path):
    from sentence_transformers import SentenceTransformer

    other = SentenceTransformer(str(build_family("xlmr", tmp_path / "xlmr")), device="cpu")
    d = pk.diagnose(TEXTS, other.encode(TEXTS), model=mpnet)
    assert d.best is None and not d.equivalent and d.fix == ""
    assert d.verdict.startswith("NO MATCH: no candidate reproduces these vectors"), d.verdict
    assert all(a.matched == 0 for a in d.candidates)


def test_bad_vectors_are_refused_in_one_line(mpnet, transformer):
    vectors = st_vectors(transformer, "mean", True)
    with pytest.raises(pk.InputError, match=r"one row per text \(8\), but got 7 rows"):
        pk.diagnose(TEXTS, vectors[:7], model=mpnet)
    with pytest.raises(pk.InputError, match="at most 96 wide"):
        pk.diagnose(TEXTS, np.ones((8, 97), np.float32), model=mpnet)
    with pytest.raises(pk.InputError, match="float vectors"):
        pk.diagnose(TEXTS, vectors.astype(np.int8), model=mpnet)


def test_vector_files_read_back_as_written(tmp_path):
    from poolkit.io.writers import open_writer

    arr = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    for ext in ("parquet", "jsonl"):
        path = tmp_path / f"v.{ext}"
        with open_writer(path, ["mean"]) as w:
            w.write(np.arange(5), {"mean": arr})
        np.testing.assert_array_equal(read_vectors(path), arr)
    np.save(tmp_path / "v.npy", arr)
    np.testing.assert_array_equal(read_vectors(tmp_path / "v.npy"), arr)
    openai = {"data": [{"index": i, "embedding": arr[i].tolist()} for i in (1, 0, 2, 3, 4)]}
    (tmp_path / "v.json").write_text(json.dumps(openai))
    np.testing.assert_allclose(read_vectors(tmp_path / "v.json"), arr)


def test_cli_diagnoses_a_file_and_writes_only_what_is_asked(mpnet, transformer, tmp_path):
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    np.save(tmp_path / "v.npy", st_vectors(transformer, "cls", True))
    before = sorted(p.name for p in tmp_path.iterdir())
    r = poolkit("diagnose", "texts.txt", "v.npy", "--model", str(mpnet), cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert out.splitlines()[0].startswith("MISMATCH: these are CLS vectors"), out
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    r = poolkit("diagnose", "texts.txt", "v.npy", "--model", str(mpnet), "--json",
                "-o", "report.json", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    report = json.loads(r.stdout)
    assert report["best"]["recipe"] == "cls/l2" and report["fix"] == "--recipe mean"
    assert json.loads((tmp_path / "report.json").read_text()) == report
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "report.json"])
    # --check: exit 1 on MISMATCH (a CI gate), 0 on OK; the same report either way.
    checked = poolkit("diagnose", "texts.txt", "v.npy", "--model", str(mpnet), "--check",
                      cwd=tmp_path)  # fmt: skip
    assert (checked.returncode, checked.stdout) == (1, out.encode()), checked.stderr
    from sentence_transformers import SentenceTransformer

    np.save(tmp_path / "ok.npy", SentenceTransformer(str(mpnet), device="cpu").encode(TEXTS))
    ok = poolkit("diagnose", "texts.txt", "ok.npy", "--model", str(mpnet), "--check",
                 cwd=tmp_path)  # fmt: skip
    assert ok.returncode == 0 and ok.stdout.decode().startswith("OK"), ok.stdout


def test_cli_bad_input_is_one_line(mpnet, transformer, tmp_path):
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    np.save(tmp_path / "short.npy", st_vectors(transformer, "mean", True)[:5])
    np.save(tmp_path / "wide.npy", np.ones((8, 500), np.float32))
    run = lambda *a: poolkit("diagnose", "texts.txt", *a, "--model", str(mpnet), cwd=tmp_path)  # noqa: E731
    one_error_line(run("short.npy"), 2, "VECTORS", "one row per text (8), but got 5 rows")
    one_error_line(run("wide.npy"), 2, "VECTORS", "at most 96 wide")
    one_error_line(run(), 2, "VECTORS", "one of the three")
    one_error_line(run("short.npy", "--url", "http://127.0.0.1:9/embed"), 2, "one of the three")
    one_error_line(run("--url", "http://127.0.0.1:9/other"), 2, "--url", "/embed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["short.npy", "texts.txt", "wide.npy"]


def test_an_onnx_export_with_the_wrong_pooling_is_diagnosed(mpnet, tmp_path):
    pytest.importorskip("onnxruntime")
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    pk.export(mpnet, tmp_path / "cls-onnx", recipe="cls", format="onnx")
    r = poolkit("diagnose", "texts.txt", "--onnx", "cls-onnx/model.onnx", "--model", str(mpnet),
                "--json", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    report = json.loads(r.stdout)
    assert report["best"]["recipe"] == "cls/raw" and report["best"]["head"] is True, report
    assert report["best"]["matched"] == len(TEXTS)
    assert report["verdict"].startswith("MISMATCH: these are CLS vectors; the model was "
                                        "trained with mean"), report["verdict"]  # fmt: skip


def test_cli_runs_a_sentence_transformers_folder(mpnet, transformer, tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    SentenceTransformer(modules=[transformer, Pooling(32, pooling_mode="max")],
                        device="cpu").save(str(tmp_path / "max-folder"))  # fmt: skip
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    r = poolkit("diagnose", "texts.txt", "max-folder", "--model", str(mpnet), "--json",
                cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["best"]["recipe"] == "max/raw"


def test_differences_say_what_separates_the_nearest():
    from poolkit.diagnosis.agreement import differences, row_scores

    rng = np.random.default_rng(0)
    base = rng.standard_normal((40, 16)).astype(np.float32)
    tokens = np.arange(40) * 10  # text i has 10 i tokens

    def why(target, vectors):
        scores = row_scores(target, vectors, np.linalg.norm(target, axis=1))
        return " | ".join(differences(target, vectors, scores, tokens, 1e-4))

    unit = base / np.linalg.norm(base, axis=1, keepdims=True)
    assert "the vectors are normalised (unit norms)" in why(unit, base)
    assert "the vectors are not normalised" in why(base, unit)
    assert "scaled by 2" in why(2 * base, base)
    cut = base.copy()
    cut[25:] += rng.standard_normal((15, 16)).astype(np.float32)  # texts of 250+ tokens differ
    assert "truncated at 240 to 249 tokens" in why(cut, base)
    shifted = unit + 0.3 * rng.standard_normal(16).astype(np.float32)  # one shift, every row
    assert "a shift common to every row" in why(shifted, unit)
    other = rng.standard_normal((40, 16)).astype(np.float32)
    assert "vectors of another model" in why(other, base)
