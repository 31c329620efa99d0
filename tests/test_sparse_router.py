"""Inference-free sparse models (a sentence-transformers ``Router``: static per-term query
weights, SPLADE documents) against ``SparseEncoder(dir).encode_query`` /
``encode_document`` on a tiny random folder saved by sentence-transformers itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from clitools import one_error_line, poolkit
from tiny_models import build_inference_free, build_mlm

import poolkit as pk
from poolkit.errors import InputError

pytestmark = pytest.mark.filterwarnings("ignore::poolkit.driver.TruncationWarning")

TEXTS = [
    "Which cat sat on the mat, and which cat did not?",  # a repeated term counts once
    "a",
    "",
    "The quick brown fox jumps over the lazy dog, and keeps running past the end of the model's "
    "maximum length so that truncation applies here too.",
    "Pooling turns token vectors into one vector per text.",
]
PROMPTS = {"query": "query: ", "document": "passage: "}


@pytest.fixture(scope="module")
def mlm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_mlm("bert_dense", tmp_path_factory.mktemp("mlm") / "bert")


@pytest.fixture(scope="module")
def routed(mlm: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_inference_free(mlm, tmp_path_factory.mktemp("if") / "model", prompts=PROMPTS)


def _st(folder: Path) -> object:
    from sentence_transformers.sparse_encoder import SparseEncoder

    return SparseEncoder(str(folder), device="cpu")


def _dense(vectors: object) -> np.ndarray:
    return vectors.to_dense().numpy()


def _as_wide(ref: np.ndarray, width: int) -> np.ndarray:
    """``ref`` zero-padded to ``width`` columns: the static weights cover the tokenizer's
    vocabulary, the MLM head the model's (wider in the tiny model); poolkit gives both
    sides the document width."""
    return np.pad(ref, ((0, 0), (0, width - ref.shape[1])))


def test_queries_and_documents_equal_sparse_encoder(routed: Path) -> None:
    st = _st(routed)
    queries = pk.embed(TEXTS, model=routed, recipe="splade", prompt_name="query")
    documents = pk.embed(TEXTS, model=routed, recipe="splade", prompt_name="document")
    assert isinstance(queries, sp.csr_array) and queries.dtype == np.float32
    assert queries.shape == documents.shape
    want_q = _as_wide(_dense(st.encode_query(TEXTS, convert_to_tensor=True)), queries.shape[1])
    want_d = _dense(st.encode_document(TEXTS, convert_to_tensor=True))
    np.testing.assert_allclose(queries.toarray(), want_q, rtol=0, atol=1e-5)
    np.testing.assert_allclose(documents.toarray(), want_d, rtol=0, atol=1e-5)
    assert queries.nnz == np.count_nonzero(want_q) and queries.has_sorted_indices
    assert queries[[2]].nnz > 0  # an empty query still has its prompt's terms
    # The query side is the stored weights themselves: no model, no activation.
    weight = _dense(st[0].sub_modules["query"][0].weight.detach().to_sparse())
    row = queries[[0]]
    np.testing.assert_array_equal(row.data, weight[row.indices])


def test_top_k_is_max_active_dims_on_both_sides(routed: Path) -> None:
    st = _st(routed)
    q = pk.embed(TEXTS, model=routed, recipe="splade/top3", prompt_name="query")
    d = pk.embed(TEXTS, model=routed, recipe="splade/top3", prompt_name="document")
    want_q = _dense(st.encode_query(TEXTS, convert_to_tensor=True, max_active_dims=3))
    want_d = _dense(st.encode_document(TEXTS, convert_to_tensor=True, max_active_dims=3))
    np.testing.assert_allclose(q.toarray(), _as_wide(want_q, q.shape[1]), rtol=0, atol=1e-5)
    np.testing.assert_allclose(d.toarray(), want_d, rtol=0, atol=1e-5)
    assert np.diff(q.indptr).max() == 3


def test_the_folder_says_its_routes(routed: Path) -> None:
    info = pk.model_info(routed)
    assert info.pooling == "splade" and not info.pooling_is_guess
    assert info.query_route == routed / "query_0_SparseStaticEmbedding"
    assert info.path == (routed / "document_0_MLMTransformer").resolve()
    assert info.prompts == PROMPTS
    assert any(label == "query route" for label, _ in info.describe())
    # No recipe, no prompt name: the folder's SpladePooling on the document route, as
    # sentence-transformers' plain encode (its default route, no prompt).
    st = _st(routed)
    got = pk.embed(TEXTS, model=routed)
    want = _dense(st.encode(TEXTS, convert_to_tensor=True))
    np.testing.assert_allclose(got.toarray(), want, rtol=0, atol=1e-5)


def test_window_keeps_every_query_token(routed: Path) -> None:
    cut = pk.embed(TEXTS[3:4], model=routed, recipe="splade", prompt_name="query")
    whole, stats = pk.embed(TEXTS[3:4], model=routed, recipe="splade", prompt_name="query",
                            long_text="window", return_stats=True)  # fmt: skip
    assert stats.num_truncated == 0 and whole.nnz > cut.nnz
    # Every term of the cut query is in the whole one, with the same weight.
    np.testing.assert_array_equal(whole[[0]][:, cut.indices].toarray()[0], cut.data)


def test_max_length_cuts_the_queries_too(routed: Path) -> None:
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer

    static = routed / "query_0_SparseStaticEmbedding"
    weight = load_file(str(static / "model.safetensors"))["weight"]
    tokenizer = AutoTokenizer.from_pretrained(str(static))
    got, stats = pk.embed(TEXTS, model=routed, recipe="splade", prompt_name="query",
                          max_length=5, return_stats=True)  # fmt: skip
    for row, text in enumerate(TEXTS):
        ids = tokenizer(PROMPTS["query"] + text, add_special_tokens=False)["input_ids"][:5]
        want = np.zeros(got.shape[1], np.float32)
        want[ids] = weight[ids]  # each distinct term once, its stored weight
        np.testing.assert_array_equal(got[[row]].toarray()[0], want)
    n_ids = [len(tokenizer(PROMPTS["query"] + t, add_special_tokens=False)["input_ids"])
             for t in TEXTS]  # fmt: skip
    long = [i for i, n in enumerate(n_ids) if n > 5]
    assert stats.truncated == long and stats.max_length == 5


def test_cli_query_side_equals_library(routed: Path, tmp_path: Path) -> None:
    (tmp_path / "q.txt").write_text("\n".join(t for t in TEXTS if t) + "\n", encoding="utf-8")
    r = poolkit("embed", "q.txt", "-o", "q.npz", "--recipe", "splade/top4", "--model",
                str(routed), "--prompt-name", "query", "-q", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    want = pk.embed([t for t in TEXTS if t], model=routed, recipe="splade/top4",
                    prompt_name="query")  # fmt: skip
    np.testing.assert_array_equal(sp.load_npz(tmp_path / "q.npz").toarray(), want.toarray())


def test_a_router_poolkit_cannot_run_is_refused_in_one_line(mlm: Path, tmp_path: Path) -> None:
    folder = build_inference_free(mlm, tmp_path / "two-towers", query_route="mlm")
    with pytest.raises(InputError, match="query route is MLMTransformer \\+ SpladePooling") as e:
        pk.embed(["x"], model=folder, recipe="splade")
    assert "\n" not in str(e.value) and "SparseStaticEmbedding" in str(e.value)
    (tmp_path / "in.txt").write_text("x\n", encoding="utf-8")
    r = poolkit("embed", "in.txt", "-o", "x.npz", "--recipe", "splade", "--model", str(folder),
                cwd=tmp_path)  # fmt: skip
    one_error_line(r, 2, "query route is MLMTransformer")
    assert not (tmp_path / "x.npz").exists()


def test_static_weights_wider_than_the_vocabulary_are_refused(routed: Path, tmp_path) -> None:
    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "wide"
    shutil.copytree(routed, folder)
    weights = folder / "query_0_SparseStaticEmbedding" / "model.safetensors"
    width = json.loads((folder / "document_0_MLMTransformer" / "config.json").read_text())
    wide = np.ones(width["vocab_size"] + 5, np.float32)
    assert load_file(str(weights))["weight"].shape[0] < wide.shape[0]
    save_file({"weight": wide}, str(weights))
    with pytest.raises(
        InputError,
        match=r"Expected query weights over the document route's vocabulary of 400 .*, but they "
        "cover 405 terms",
    ) as e:
        pk.embed(["x"], model=folder, recipe="splade", prompt_name="query")
    assert "\n" not in str(e.value)


def test_query_and_document_name_the_sides_without_prompts(mlm: Path, tmp_path: Path) -> None:
    """A folder whose config lists no prompts (older saves): the two names still pick the
    routes, with no prompt, as sentence-transformers' encode_query/encode_document do."""
    folder = build_inference_free(mlm, tmp_path / "model")
    config = folder / "config_sentence_transformers.json"
    settings = json.loads(config.read_text())
    settings["prompts"] = {}
    config.write_text(json.dumps(settings))
    st = _st(folder)
    q = pk.embed(TEXTS, model=folder, recipe="splade", prompt_name="query")
    d = pk.embed(TEXTS, model=folder, recipe="splade", prompt_name="document")
    want_q = _dense(st.encode_query(TEXTS, convert_to_tensor=True))
    np.testing.assert_allclose(q.toarray(), _as_wide(want_q, q.shape[1]), rtol=0, atol=1e-5)
    want_d = _dense(st.encode_document(TEXTS, convert_to_tensor=True))
    np.testing.assert_allclose(d.toarray(), want_d, rtol=0, atol=1e-5)
    with pytest.raises(InputError, match="prompt_name"):
        pk.embed(TEXTS, model=folder, recipe="splade", prompt_name="passage")
