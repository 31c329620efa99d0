"""The model's pipeline and prompts through the real CLI (subprocesses) and the compare runner.

One tiny model folder saved by sentence-transformers (BERT + Dense + Normalize, prompts
``query``/``passage``, ``include_prompt: false``); references come from
``SentenceTransformer.encode`` on the same folder.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
from clitools import one_error_line, poolkit
from tiny_models import build_family

DATA = Path(__file__).parent / "data"
TEXTS = ["John works at Google in London.", "A cat sat on the mat.", "  two  spaces  "]


@pytest.fixture(scope="module")
def dense_dir(tmp_path_factory):
    logging.disable(logging.WARNING)
    try:
        return build_family("bert_dense", tmp_path_factory.mktemp("cli") / "bert_dense")
    finally:
        logging.disable(logging.NOTSET)


@pytest.fixture(scope="module")
def st(dense_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(dense_dir), device="cpu")


@pytest.fixture(scope="module")
def texts_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("texts") / "texts.txt"
    path.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("flags", "kw"),
    [
        ((), {}),
        # each CLI run is a process that imports torch: the prompts run with --slow
        pytest.param(("--prompt-name", "query"), {"prompt_name": "query"}, marks=pytest.mark.slow),
        pytest.param(("--prompt", "search: "), {"prompt": "search: "}, marks=pytest.mark.slow),
    ],
)
def test_cli_embed_is_the_model_pipeline(dense_dir, st, texts_file, tmp_path, flags, kw):
    out = tmp_path / "v.npy"
    result = poolkit("embed", str(texts_file), "-o", str(out), "--model", str(dense_dir), "-q",
                     *flags, cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    got = np.load(out)
    assert got.shape == (3, 16)
    assert float(np.abs(got - st.encode(TEXTS, **kw)).max()) <= 1e-5


@pytest.mark.slow  # CLI processes: 5-25 s each on 2 cores
def test_cli_pooled_only(dense_dir, st, texts_file, tmp_path):
    from sentence_transformers import SentenceTransformer

    out = tmp_path / "v.npy"
    result = poolkit("embed", str(texts_file), "-o", str(out), "--model", str(dense_dir), "-q",
                     "--pooled-only", "--recipe", "cls+mean", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    pooled = SentenceTransformer(modules=[st[0], st[1]], device="cpu")
    st[1].pooling_mode, saved = ("cls", "mean"), st[1].pooling_mode
    try:
        ref = pooled.encode(TEXTS)
    finally:
        st[1].pooling_mode = saved
    assert float(np.abs(np.load(out) - ref).max()) <= 1e-5


@pytest.mark.slow  # CLI processes: 5-25 s each on 2 cores
@pytest.mark.parametrize(
    ("flags", "fragments"),
    [
        (("--prompt-name", "qeury"), ("--prompt-name", "'passage', 'query'", "--prompt '...'")),
        (("--recipe", "cls+mean"), ("64-d", "2_Dense", "--pooled-only")),
    ],
)
def test_cli_embed_refusals_are_one_line(dense_dir, texts_file, tmp_path, flags, fragments):
    out = tmp_path / "v.npy"
    result = poolkit("embed", str(texts_file), "-o", str(out), "--model", str(dense_dir), "-q",
                     *flags, cwd=tmp_path)  # fmt: skip
    one_error_line(result, 2, *fragments)
    assert not out.exists() and not list(tmp_path.glob("v.npy*"))


@pytest.mark.slow  # CLI processes: 5-25 s each on 2 cores
def test_cli_inspect_shows_pipeline_and_prompts(dense_dir, tmp_path):
    result = poolkit("inspect", str(dense_dir), cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().splitlines()
    pipeline = [line.split(None, 2)[2] for line in lines if line.startswith("pipeline ")]
    assert pipeline == [
        "Transformer (root): token vectors [input]",
        "Pooling (1_Pooling): pooling mean, prompt tokens excluded [input]",
        "Dense (2_Dense): 32 -> 16, Tanh, bias [applied]",
        "Normalize (3_Normalize): L2 normalisation [applied]",
    ]
    assert any(line.startswith("prompt query ") and "'query: '" in line for line in lines)
    data = json.loads(poolkit("inspect", str(dense_dir), "--json", cwd=tmp_path).stdout)
    assert [s["status"] for s in data["pipeline"]] == ["input", "input", "applied", "applied"]


def test_compare_intended_row_is_the_full_pipeline(dense_dir, st):
    """compare's intended row is the model's own vector (Dense included); a row the
    Dense cannot take is scored on pooled vectors, and a note says so."""
    from poolkit import Encoder
    from poolkit.compare.embedding import embed_sequences
    from poolkit.compare.runner import Settings
    from poolkit.recipe import Recipe

    settings = Settings("sts", prompt_name="query")
    enc = Encoder(dense_dir, device="cpu")
    cands = [Recipe("mean"), Recipe("cls+mean"), Recipe("cls")]
    got, _ = embed_sequences(enc, TEXTS, cands, settings, "test")
    assert float(np.abs(got[cands[0]] - st.encode(TEXTS, prompt_name="query")).max()) <= 1e-5
    assert got[cands[1]].shape == (3, 64) and got[cands[2]].shape == (3, 16)
    assert any(n.startswith("cls+mean: pooled vectors") for n in settings.notes)


@pytest.mark.slow  # CLI processes: 5-25 s each on 2 cores
@pytest.mark.parametrize("document_prompt", ["passage", None])
def test_cli_compare_with_prompt_names(dense_dir, st, tmp_path, document_prompt):
    """Retrieval with a prompt per side scores what the model's own pipeline gives for
    queries (``query`` prompt) and documents (``passage`` prompt; none named: the model's
    default, here none, never the queries'): nDCG@10 of the intended row against
    ``SentenceTransformer.encode`` and pytrec_eval."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    folder = DATA / "stsb-images-retrieval"
    sides = ["--query-prompt-name", "query"]
    if document_prompt:
        sides += ["--document-prompt-name", document_prompt]
    result = poolkit("compare", str(folder), "--task", "retrieval",
                     "--model", str(dense_dir), "--strategies", "mean", "cls", "--bootstrap", "0",
                     *sides, "--json", str(tmp_path / "r.json"), cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    intended = next(r for r in json.loads((tmp_path / "r.json").read_text())["results"]
                    if r["intended"])  # fmt: skip
    corpus = [json.loads(line) for line in (folder / "corpus.jsonl").open()]
    queries = {q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").open())}
    qrels: dict[str, dict[str, int]] = {}
    for line in list((folder / "qrels" / "test.tsv").open())[1:]:
        q, d, score = line.rstrip("\n").split("\t")
        qrels.setdefault(q, {})[d] = int(score)
    docs = st.encode([(d["title"] + " " + d["text"]).strip() for d in corpus],
                     prompt_name=document_prompt, normalize_embeddings=True)  # fmt: skip
    qvec = st.encode([queries[q] for q in qrels], prompt_name="query", normalize_embeddings=True)
    sims = qvec @ docs.T
    run = {q: {d["_id"]: float(sims[i, j]) for j, d in enumerate(corpus)}
           for i, q in enumerate(qrels)}  # fmt: skip
    per = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    expected = float(np.mean([per[q]["ndcg_cut_10"] for q in qrels]))
    assert intended["ndcg_at_10"] == pytest.approx(expected, abs=1e-6)
    if document_prompt is None:
        return
    bad = poolkit("compare", str(DATA / "stsb-dev-sample.csv"), "--task", "sts",
                  "--model", str(dense_dir), "--document-prompt-name", "passage", cwd=tmp_path)  # fmt: skip
    one_error_line(bad, 2, "--document-prompt-name", "given only for --task retrieval")


def test_ray_embedder_honours_prompt_and_pipeline(dense_dir, st):
    pytest.importorskip("ray")
    from poolkit import PipelineError
    from poolkit.ray import Embedder

    got = Embedder(str(dense_dir), prompt_name="query", num_threads=1).embed(TEXTS)
    (vec,) = got.values()
    assert float(np.abs(vec - st.encode(TEXTS, prompt_name="query")).max()) <= 1e-5
    with pytest.raises(PipelineError, match="`pipeline='pooled'`"):
        Embedder(str(dense_dir), recipe="cls+mean", num_threads=1)
    pooled = Embedder(str(dense_dir), recipe="cls+mean", pipeline="pooled", num_threads=1)
    assert pooled.embed(TEXTS)["cls+mean"].shape == (3, 64)
    with pytest.raises(ValueError, match="`prompt_name`"):
        Embedder(str(dense_dir), prompt_name="nope", num_threads=1)
