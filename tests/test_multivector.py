"""The multi-vector recipe level against its references: sentence-transformers 6's
``MultiVectorEncoder`` (token vectors of both sides, token pooling, MaxSim) on tiny random
folders of three architectures and a PyLate-format folder, a plain encoder's
``output_value="token_embeddings"``, and fastembed 0.9.1's MUVERA."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from fastembed_ref import load_muvera
from tiny_models import MULTIVECTOR_FAMILIES, build_family, build_multivector, pylate_folder

import poolkit
from poolkit import Recipe, RecipeError
from poolkit.errors import InputError
from poolkit.multivector import MuveraOptions, maxsim, muvera_encode, pool_tokens

QUERIES = [
    "how do cats sleep?",
    "a",
    "what is the capital of France and why is it so big and old, really, tell me now",
]
DOCUMENTS = [
    "Cats sleep sixteen hours a day.",
    "The dog, barked!",
    "Paris is the capital of France; it is large, old and beautiful, with many museums, "
    "parks and cafés — and far too many tourists in August.",
    "Représentation des phrases — naïve café, façade, Zürich.",
]
FOLDERS = (*MULTIVECTOR_FAMILIES, "pylate")


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("multivector")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = {n: build_multivector(n, root / n) for n in MULTIVECTOR_FAMILIES}
    out["pylate"] = pylate_folder(out["bert_dense"], root / "pylate")
    return out


def _st(path: Path):
    from sentence_transformers import MultiVectorEncoder

    return MultiVectorEncoder(str(path), device="cpu")


def _embed(texts, path, recipe="multivector:tokens", **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", poolkit.TruncationWarning)
        return poolkit.embed(texts, model=path, recipe=recipe, **kw)


def _same(ours, theirs, atol=1e-5):
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        b = b.numpy() if hasattr(b, "numpy") else np.asarray(b)
        assert a.dtype == np.float32 and a.shape == b.shape, (a.shape, b.shape)
        np.testing.assert_allclose(a, b, atol=atol, rtol=0)


@pytest.mark.parametrize("name", FOLDERS)
def test_sides_equal_sentence_transformers(folders, name):
    st = _st(folders[name])
    _same(_embed(QUERIES, folders[name], prompt_name="query"),
          st.encode_query(QUERIES, convert_to_numpy=True))  # fmt: skip
    _same(_embed(DOCUMENTS, folders[name], prompt_name="document"),
          st.encode_document(DOCUMENTS, convert_to_numpy=True))  # fmt: skip
    # No prompt_name: the document side, as encode_document.
    _same(_embed(DOCUMENTS, folders[name]), st.encode_document(DOCUMENTS, convert_to_numpy=True))


def test_no_recipe_gives_the_folders_own_token_vectors(folders, tmp_path):
    # A MultiVectorEncoder folder's intended output is its token vectors, as its encode.
    path = folders["bert_dense"]
    st = _st(path)
    _same(
        _embed(DOCUMENTS, path, recipe=None), st.encode_document(DOCUMENTS, convert_to_numpy=True)
    )
    _same(_embed(QUERIES, path, recipe=None, prompt_name="query"),
          st.encode_query(QUERIES, convert_to_numpy=True))  # fmt: skip
    # The command line too: no --recipe writes what --recipe multivector:tokens writes.
    from clitools import run_cli

    (tmp_path / "in.txt").write_text("\n".join(DOCUMENTS) + "\n")
    for out, extra in (("own.npz", []), ("named.npz", ["--recipe", "multivector:tokens"])):
        done = run_cli(["embed", "in.txt", "-o", out, "--model", str(path), "--quiet", *extra],
                       cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr
    own, named = np.load(tmp_path / "own.npz"), np.load(tmp_path / "named.npz")
    assert sorted(own.files) == sorted(named.files)
    for key in own.files:
        np.testing.assert_array_equal(own[key], named[key])


def test_query_expansion_scores_mask_tokens(folders):
    # bert_dense: fixed expansion to 12 tokens; every query has exactly 12 vectors.
    shapes = {v.shape[0] for v in _embed(QUERIES, folders["bert_dense"], prompt_name="query")}
    assert shapes == {12}


@pytest.mark.parametrize("name", ["bert_dense", "roberta"])
@pytest.mark.parametrize("factor", [2, 3])
def test_token_pooling_equals_hierarchical_token_pooling(folders, name, factor):
    from sentence_transformers.multi_vector_encoder.modules import HierarchicalTokenPooling

    pooling = HierarchicalTokenPooling(pool_factor=factor)
    ref = _st(folders[name]).encode_document(DOCUMENTS, convert_to_numpy=True,
                                             token_pooling=pooling)  # fmt: skip
    _same(_embed(DOCUMENTS, folders[name], f"multivector:tokens/pool{factor}"), ref)
    # Queries are never pooled (the pooler's tasks are documents only).
    _same(_embed(QUERIES, folders[name], f"multivector:tokens/pool{factor}", prompt_name="query"),
          _embed(QUERIES, folders[name], prompt_name="query"))  # fmt: skip


def test_dims_per_token_equal_truncate_dim(folders):
    st = _st(folders["bert_dense"])
    ref = st.encode_document(DOCUMENTS, convert_to_numpy=True, truncate_dim=8)
    _same(_embed(DOCUMENTS, folders["bert_dense"], "multivector:tokens/8"), ref)
    half = _embed(DOCUMENTS, folders["bert_dense"], "multivector:tokens/8/float16")
    assert half[0].dtype == np.float16
    np.testing.assert_allclose(half[0].astype(np.float32), ref[0], atol=1e-3)


@pytest.mark.parametrize("precision", ["binary", "ubinary"])
def test_bits_per_token_equal_quantize_embeddings(folders, precision):
    from sentence_transformers.util.quantization import quantize_embeddings

    ref = _st(folders["bert_dense"]).encode_document(DOCUMENTS, convert_to_numpy=True,
                                                     truncate_dim=8)  # fmt: skip
    ours = _embed(DOCUMENTS, folders["bert_dense"], f"multivector:tokens/8/{precision}")
    for a, b in zip(ours, ref, strict=True):  # each token packed as its own vector
        want = quantize_embeddings(b, precision=precision)
        assert a.dtype == want.dtype and a.shape == want.shape == (len(b), 1)
        np.testing.assert_array_equal(a, want)


def test_int8_tokens_are_refused_in_one_line(folders):
    for kw in ({"recipe": "multivector:tokens/int8"},
               {"recipe": "multivector:tokens", "precision": "uint8"}):  # fmt: skip
        with pytest.raises(RecipeError) as e:
            poolkit.embed(DOCUMENTS, model=folders["bert_dense"], **kw)
        line = str(e.value)
        assert "\n" not in line and "/binary" in line
        assert f"Closest valid name: {kw['recipe']}." not in line  # never the refused name


@pytest.mark.parametrize("name", ["bert_dense", "modernbert"])
def test_maxsim_equals_similarity(folders, name):
    st = _st(folders[name])
    q, d = _embed(QUERIES, folders[name], prompt_name="query"), _embed(DOCUMENTS, folders[name])
    tq = [torch.from_numpy(x) for x in q]
    td = [torch.from_numpy(x) for x in d]
    np.testing.assert_allclose(maxsim(q, d), st.similarity(tq, td).numpy(), atol=1e-5)
    st.similarity_fn_name = "meanmaxsim"
    np.testing.assert_allclose(maxsim(q, d, normalize=True), st.similarity(tq, td).numpy(),
                               atol=1e-5)  # fmt: skip
    # The chunked path (a tiny pair budget) gives the same scores.
    np.testing.assert_allclose(maxsim(q, d, pair_budget=5), maxsim(q, d), atol=1e-6)
    assert poolkit.maxsim is maxsim


def test_maxsim_by_hand():
    rng = np.random.default_rng(0)
    q = [rng.standard_normal((n, 4)).astype(np.float32) for n in (1, 3)]
    d = [rng.standard_normal((n, 4)).astype(np.float32) for n in (2, 5, 1)]
    want = np.array([[sum(max(float(a @ b) for b in dj) for a in qi) for dj in d] for qi in q])
    np.testing.assert_allclose(maxsim(q, d), want, rtol=1e-5)


def test_plain_encoder_gives_token_embeddings(tmp_path):
    from sentence_transformers import SentenceTransformer

    folder = build_family("bert_dense", tmp_path / "bert_dense")
    ref = SentenceTransformer(str(folder), device="cpu").encode(
        DOCUMENTS, output_value="token_embeddings", convert_to_numpy=True)  # fmt: skip
    _same(_embed(DOCUMENTS, folder), ref)
    l2 = _embed(DOCUMENTS, folder, "multivector:tokens/l2")
    np.testing.assert_allclose(np.linalg.norm(l2[2], axis=1), 1, atol=1e-6)


@pytest.mark.parametrize(
    "options", [MuveraOptions(), MuveraOptions(4, 8, 3, 7), MuveraOptions(2, 16, 5, 0)]
)
def test_muvera_equals_fastembed(options):
    fastembed = load_muvera()
    if fastembed is None:
        pytest.skip("no fastembed 0.9.1 wheel (POOLKIT_FASTEMBED_WHEEL; .ci/run downloads it)")
    rng = np.random.default_rng(3)
    ref = fastembed.Muvera(16, options.k_sim, options.dim_proj, options.r_reps, options.seed)
    for n in (1, 2, 9, 40):
        x = rng.standard_normal((n, 16)).astype(np.float32)
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        np.testing.assert_allclose(muvera_encode(x, options, query=True),
                                   ref.process_query(x), rtol=1e-6, atol=1e-6)  # fmt: skip
        np.testing.assert_allclose(muvera_encode(x, options, query=False),
                                   ref.process_document(x), rtol=1e-6, atol=1e-6)  # fmt: skip


def test_muvera_recipe_gives_one_vector_per_text(folders):
    options = MuveraOptions(3, 8, 4, 1)
    out = _embed(
        DOCUMENTS,
        folders["bert_dense"],
        "multivector:tokens/muvera:k_sim=3,dim_proj=8,r_reps=4,seed=1",
    )
    tokens = _embed(DOCUMENTS, folders["bert_dense"])
    assert out.shape == (len(DOCUMENTS), options.output_dim()) and out.dtype == np.float32
    np.testing.assert_array_equal(out[1], muvera_encode(tokens[1], options, query=False))
    q = _embed(QUERIES, folders["bert_dense"], "multivector:tokens/muvera", prompt_name="query")
    tq = _embed(QUERIES, folders["bert_dense"], prompt_name="query")
    np.testing.assert_array_equal(q[0], muvera_encode(tq[0], MuveraOptions(), query=True))


def test_pool_tokens_keeps_protected_and_normalises():
    x = np.random.default_rng(1).standard_normal((9, 6)).astype(np.float32)
    out = pool_tokens(x, 2)
    assert out.shape == (1 + 4, 6)
    np.testing.assert_allclose(out[0], x[0] / np.linalg.norm(x[0]), rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1, rtol=1e-6)


@pytest.mark.parametrize(
    "name",
    [
        "multivector:tokens",
        "multivector:tokens/pool2",
        "multivector:tokens/pool1.5/raw/64/float16",
        "multivector:tokens/l2/32/muvera:k_sim=4,dim_proj=8",
        "multivector:tokens/muvera/binary",
    ],
)
def test_recipe_round_trips(name):
    r = Recipe.parse(name)
    assert Recipe.parse(str(r)) == r and Recipe.from_json(r.to_json()) == r
    assert r.kind == ("dense" if r.muvera else "multivector")
    assert Recipe.parse("mean").kind == "dense"


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("multivector:tokens/pool0.5", "a number >= 1"),
        ("mean/pool2", "None at the sequence level"),
        ("multivector:cls", "tokens at the multivector level"),
        ("multivector:tokens/int8", "not offered yet: use /float16, /binary or /ubinary"),
        ("multivector:tokens/muvera:k=3", "KEY=INTEGER"),
        ("multivector:tokens@last4", "the model's last layer"),
    ],
)
def test_recipe_refusals(name, needle):
    with pytest.raises(RecipeError, match=needle):
        Recipe.parse(name)


def test_bad_input_is_refused_before_the_model_runs(folders):
    path = folders["bert_dense"]
    with pytest.raises(InputError, match="dim_proj"):  # tokens are 16 wide
        _embed(DOCUMENTS, path, "multivector:tokens/muvera:dim_proj=32")
    with pytest.raises(InputError, match="dims"):
        _embed(DOCUMENTS, path, "multivector:tokens/64")
    with pytest.raises(
        InputError, match=r"`layer_how` to be left unset.*`layer_how` and `pipeline`"
    ):
        poolkit.embed(DOCUMENTS, model=path, recipe="multivector:tokens", layer_how="concat",
                      pipeline="pooled")  # fmt: skip
    with pytest.raises(InputError, match="prompt_name"):
        _embed(DOCUMENTS, path, prompt_name="passage")
    rng = np.random.default_rng(0)
    with pytest.raises(InputError, match="width 4"):
        maxsim([rng.standard_normal((2, 4))], [rng.standard_normal((3, 8))])
