"""The sparse level (SPLADE) against sentence-transformers' SparseEncoder on tiny random
masked-LM folders of four architectures: every weight to 1e-5, both poolings, both
activations, ``max_active_dims`` as ``/topK``, the folder's own pooling, ``decode``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from tiny_models import build_mlm, build_sparse_encoder

import poolkit
from poolkit.recipe import Recipe, RecipeError
from poolkit.sparse import SPARSE_STRATEGIES, NoMLMHeadError
from poolkit.sparse.pooling import splade_pool

TEXTS = [
    "John works at Google in London.",
    "a cat",
    "The quick brown fox jumps over the lazy dog, and keeps running past the end of the model's "
    "maximum length so that truncation applies here too.",
    "",
    "Pooling turns token vectors into one vector per text.",
]
pytestmark = pytest.mark.filterwarnings("ignore::poolkit.driver.TruncationWarning")
ARCHS = ("bert_dense", "distilbert", "roberta", "modernbert")


@pytest.fixture(scope="module")
def mlm_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("mlm")
    return {name: build_mlm(name, root / name) for name in ARCHS}


def _st(folder: object, pooling: str, activation: str, **kw: object) -> object:
    from sentence_transformers.sparse_encoder import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    modules = [MLMTransformer(str(folder), max_seq_length=24), SpladePooling(pooling, activation)]
    return SparseEncoder(modules=modules, device="cpu", **kw)


def _dense(model: object, texts: list[str], **kw: object) -> np.ndarray:
    return model.encode(texts, convert_to_tensor=True, **kw).to_dense().numpy()


@pytest.mark.parametrize("arch", ARCHS)
def test_equals_sparse_encoder(mlm_dirs: dict[str, object], arch: str) -> None:
    names = list(SPARSE_STRATEGIES)
    # One forward pass for all four recipes, small batches so rows come in several.
    got = poolkit.embed(TEXTS, model=mlm_dirs[arch], recipe=names, max_length=24,
                        max_batch_tokens=48)  # fmt: skip
    for name, (pooling, activation) in SPARSE_STRATEGIES.items():
        ref = _dense(_st(mlm_dirs[arch], pooling, activation), TEXTS)
        vec = got[name]
        assert isinstance(vec, sp.csr_array) and vec.dtype == np.float32
        assert vec.shape == ref.shape
        np.testing.assert_allclose(vec.toarray(), ref, rtol=0, atol=1e-5, err_msg=name)
        assert vec.nnz == np.count_nonzero(vec.toarray())  # no stored zeros
        assert vec.has_sorted_indices


@pytest.mark.parametrize("arch", ["bert_dense", "roberta"])
def test_top_k_is_max_active_dims(mlm_dirs: dict[str, object], arch: str) -> None:
    for name in ("splade", "splade_sum_log1p"):
        ref = _dense(_st(mlm_dirs[arch], *SPARSE_STRATEGIES[name], max_active_dims=7), TEXTS)
        got = poolkit.embed(TEXTS, model=mlm_dirs[arch], recipe=f"{name}/top7", max_length=24)
        np.testing.assert_allclose(got.toarray(), ref, rtol=0, atol=1e-5)
        assert np.diff(got.indptr).max() == 7


def test_sparse_encoder_folder_says_its_pooling(mlm_dirs: dict[str, object], tmp_path) -> None:
    from sentence_transformers.sparse_encoder import SparseEncoder

    folder = build_sparse_encoder(mlm_dirs["distilbert"], tmp_path / "st", "sum", "log1p_relu")
    info = poolkit.model_info(folder)
    assert info.pooling == "splade_sum_log1p" and not info.pooling_is_guess
    ref = _dense(SparseEncoder(str(folder), device="cpu"), TEXTS)
    got = poolkit.embed(TEXTS, model=folder)  # no recipe: the folder's SpladePooling
    np.testing.assert_allclose(got.toarray(), ref, rtol=0, atol=1e-5)


def test_slices_give_the_same_vectors() -> None:
    torch.manual_seed(0)
    hidden = torch.randn(3, 9, 8)
    mask = torch.tensor([[1] * 9, [1] * 4 + [0] * 5, [0] * 9])
    project = torch.nn.Linear(8, 50)
    for name, (pooling, activation) in SPARSE_STRATEGIES.items():
        # By hand: every position's activation, padding masked out, then max or sum.
        act = torch.log1p(torch.relu(project(hidden)))
        if activation == "log1p_relu":
            act = torch.log1p(act)
        act = act * mask[..., None]
        want = act.amax(1) if pooling == "max" else act.sum(1)
        # A Linear runs split (bias after the max), any other callable whole.
        for head in (project, lambda x: project(x)):
            for step in (1, 2, 5, 64):
                with torch.inference_mode():
                    got = splade_pool(hidden, mask.bool(), head, name, slice_tokens=step)
                torch.testing.assert_close(got, want.detach(), rtol=0, atol=1e-5)


@pytest.mark.parametrize("arch", ["bert_dense", "roberta"])
def test_head_split_with_a_decoder_bias(mlm_dirs: dict[str, object], arch: str, tmp_path) -> None:
    """A trained head has a non-zero decoder bias (random init leaves it 0): the split head
    adds it after the max, and must still equal sentence-transformers."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from poolkit.sparse.mlm import head_chain
    from poolkit.sparse.split import SplitHead, split_head

    model = AutoModelForMaskedLM.from_pretrained(str(mlm_dirs[arch])).eval()
    torch.manual_seed(1)
    with torch.no_grad():
        model.get_output_embeddings().bias.normal_(0.0, 2.0)  # some terms never fire
    folder = tmp_path / arch
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(str(mlm_dirs[arch])).save_pretrained(folder)
    assert isinstance(split_head(model, head_chain(model)), SplitHead)
    names = list(SPARSE_STRATEGIES)
    got = poolkit.embed(TEXTS, model=folder, recipe=names, max_length=24, max_batch_tokens=48)
    for name, (pooling, activation) in SPARSE_STRATEGIES.items():
        ref = _dense(_st(folder, pooling, activation), TEXTS)
        np.testing.assert_allclose(got[name].toarray(), ref, rtol=0, atol=1e-5, err_msg=name)


def test_decode_equals_sparse_encoder(mlm_dirs: dict[str, object]) -> None:
    st = _st(mlm_dirs["bert_dense"], "max", "relu")
    got = poolkit.embed(TEXTS[:2], model=mlm_dirs["bert_dense"], recipe="splade", max_length=24)
    ref = st.decode(st.encode(TEXTS[:2], convert_to_tensor=True)[0].to_dense(), top_k=5)
    mine = poolkit.sparse.decode(got[[0]], mlm_dirs["bert_dense"], top_k=5)
    assert [t for t, _ in mine] == [t for t, _ in ref]
    np.testing.assert_allclose([w for _, w in mine], [w for _, w in ref], atol=1e-5)


def test_empty_input_and_order(mlm_dirs: dict[str, object]) -> None:
    folder = mlm_dirs["bert_dense"]
    none = poolkit.embed([], model=folder, recipe="splade")
    assert none.shape == (0, 400) and isinstance(none, sp.csr_array)
    fwd = poolkit.embed(TEXTS, model=folder, recipe="splade", max_length=24)
    rev = poolkit.embed(TEXTS[::-1], model=folder, recipe="splade", max_length=24)
    np.testing.assert_array_equal(fwd.toarray(), rev.toarray()[::-1])


def test_model_without_mlm_head_is_refused(tiny_dirs: dict[str, object]) -> None:
    with pytest.raises(NoMLMHeadError, match=r"masked-language-model head.*BertModel") as e:
        poolkit.embed(["x"], model=tiny_dirs["bert_plain"], recipe="splade")
    assert "\n" not in str(e.value) and "ForMaskedLM" in str(e.value)


def test_mixed_kinds_refused(mlm_dirs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="one family per call"):
        poolkit.embed(["x"], model=mlm_dirs["bert_dense"], recipe=["mean", "splade"])


@pytest.mark.parametrize(
    "name", ["splade", "splade_sum/top64", "sparse:splade_log1p/top3", "splade_sum_log1p"]
)
def test_recipe_names_round_trip(name: str) -> None:
    r = Recipe.parse(name)
    assert r.kind == "sparse" and r.level == "sparse"
    assert Recipe.parse(str(r)) == r and Recipe.from_json(r.to_json()) == r
    assert Recipe.parse("mean").kind == "dense"


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("splade/top0", "positive number of weights"),
        ("splade/256", "/topK instead"),
        ("splade/int8", "/topK instead"),
        ("splade@last4", "drop @LAYERS"),
        ("splade/l2", "never L2-normalised"),
        ("mean/top5", "a sparse recipe"),
        ("splade_max", "splade"),
    ],
)
def test_recipe_refusals_are_one_line(name: str, fragment: str) -> None:
    with pytest.raises(RecipeError, match=None) as e:
        Recipe.parse(name)
    assert fragment in str(e.value) and "\n" not in str(e.value)


def test_dense_keywords_refused_on_sparse(mlm_dirs: dict[str, object]) -> None:
    for kw in ({"dims": 8}, {"precision": "int8"}):
        with pytest.raises(RecipeError, match="sparse recipe"):
            poolkit.embed(["x"], model=mlm_dirs["bert_dense"], recipe="splade", **kw)


def test_sparse_encoder_folder_max_active_dims_is_its_top_k(mlm_dirs, tmp_path) -> None:
    from sentence_transformers.sparse_encoder import SparseEncoder

    folder = build_sparse_encoder(mlm_dirs["bert_dense"], tmp_path / "st")
    st = SparseEncoder(str(folder), device="cpu", max_active_dims=7)
    st.save(str(folder))  # the folder now says max_active_dims 7
    assert poolkit.model_info(folder).pooling == "splade/top7"
    ref = _dense(SparseEncoder(str(folder), device="cpu"), TEXTS)
    got = poolkit.embed(TEXTS, model=folder)
    np.testing.assert_allclose(got.toarray(), ref, rtol=0, atol=1e-5)
    assert np.diff(got.indptr).max() == 7
