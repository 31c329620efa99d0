"""What a ``MultiVectorEncoder`` folder says beyond its projection, read by poolkit as
sentence-transformers runs it: a ``HierarchicalTokenPooling`` module and ``truncate_dim``
make the folder's intended recipe (:attr:`poolkit.ModelInfo.multivector`), the
``MultiVectorMask``'s ``keep_only_token_ids`` keeps only those document tokens, a pooling
poolkit cannot give is refused in one line; ``poolkit export`` round-trips through them.
Tiny random folders as tests/test_multivector.py builds them."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from tiny_models import build_multivector

import poolkit as pk
from poolkit.errors import PipelineError

QUERIES = ["how do cats sleep?", "a", "what is the capital of France, and why is it so old?"]
DOCUMENTS = [
    "Cats sleep sixteen hours a day.",
    "The dog, barked!",
    "Paris is the capital of France; it is large, old and beautiful, with many museums, "
    "parks and cafés — and far too many tourists in August.",
]


def _mve(path: Path):
    from sentence_transformers import MultiVectorEncoder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MultiVectorEncoder(str(path), device="cpu")


def _variant(source: Path, dest: Path, *, pooling=None, truncate_dim=None, keep=None) -> Path:
    """``source`` saved again by sentence-transformers with a token pooling module,
    ``truncate_dim`` or the mask's ``keep_only_token_ids``."""
    from sentence_transformers import MultiVectorEncoder

    st = _mve(source)
    modules = list(st)
    if keep is not None:
        modules[2].keep_only_token_ids = keep
    if pooling is not None:
        modules.append(pooling)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        MultiVectorEncoder(modules=modules, device="cpu", prompts=st.prompts,
                           truncate_dim=truncate_dim).save(str(dest))  # fmt: skip
    return dest


def _embed(texts, model, recipe, side):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pk.TruncationWarning)
        return pk.embed(texts, model=model, recipe=recipe, prompt_name=side)


def _same(got, want, atol=1e-5):
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        b = b.numpy() if hasattr(b, "numpy") else np.asarray(b)
        assert a.shape == b.shape, (a.shape, b.shape)
        np.testing.assert_allclose(a, b, atol=atol, rtol=0)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mv-folder")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_multivector("bert_dense", root / "bert_dense")


@pytest.mark.parametrize(("factor", "dims", "want"), [
    (2, 8, "multivector:tokens/pool2/8"),
    (3, None, "multivector:tokens/pool3"),
    (None, 8, "multivector:tokens/8"),
])  # fmt: skip
def test_intended_recipe_equals_encode(base, tmp_path, factor, dims, want):
    from sentence_transformers.multi_vector_encoder.modules import HierarchicalTokenPooling

    pooling = None if factor is None else HierarchicalTokenPooling(pool_factor=factor)
    folder = _variant(base, tmp_path / "mve", pooling=pooling, truncate_dim=dims)
    info = pk.model_info(folder)
    assert info.multivector == want
    recipe = info.intended_multivector()
    st = _mve(folder)
    _same(_embed(DOCUMENTS, folder, recipe, "document"),
          st.encode_document(DOCUMENTS, convert_to_numpy=True))  # fmt: skip
    _same(_embed(QUERIES, folder, recipe, "query"),
          st.encode_query(QUERIES, convert_to_numpy=True))  # fmt: skip


def test_plain_folder_intends_every_token(base):
    info = pk.model_info(base)
    assert info.multivector == "multivector:tokens"
    assert "MultiVectorEncoder" in info.multivector_source


@pytest.mark.parametrize("settings", [
    {"max_tokens": 4}, {"num_protected_tokens": 0}, {"tasks": ["query", "document"]},
    {"pool_factor": 2, "normalize_embeddings": False},
])  # fmt: skip
def test_pooling_poolkit_cannot_give_is_refused_in_one_line(base, tmp_path, settings):
    from sentence_transformers.multi_vector_encoder.modules import HierarchicalTokenPooling

    folder = _variant(base, tmp_path / "mve", pooling=HierarchicalTokenPooling(**settings))
    info = pk.model_info(folder)
    assert info.multivector is None
    with pytest.raises(PipelineError) as e:
        info.intended_multivector()
    msg = str(e.value)
    assert "\n" not in msg and "HierarchicalTokenPooling" in msg
    assert next(iter(settings)) in msg or "normalize_embeddings" in msg


def test_keep_only_token_ids_keeps_those_document_tokens(base, tmp_path):
    tok = json.loads((base / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    keep = sorted({tok["[CLS]"], *(tok[w] for w in ("cats", "dog", "the", "paris") if w in tok)})
    assert len(keep) >= 2
    folder = _variant(base, tmp_path / "mve", keep=keep)
    st = _mve(folder)
    docs = _embed(DOCUMENTS, folder, "multivector:tokens", "document")
    _same(docs, st.encode_document(DOCUMENTS, convert_to_numpy=True))
    _same(_embed(QUERIES, folder, "multivector:tokens", "query"),
          st.encode_query(QUERIES, convert_to_numpy=True))  # fmt: skip
    # The allowlist bites: fewer document vectors than the folder without it gives.
    full = _embed(DOCUMENTS, base, "multivector:tokens", "document")
    assert sum(len(d) for d in docs) < sum(len(d) for d in full)
    # poolkit export keeps it (MultiVectorEncoder folder), and the ONNX graph refuses it.
    out = pk.export(folder, tmp_path / "exported", recipe="multivector:tokens")
    _same(_embed(DOCUMENTS, out, "multivector:tokens", "document"), docs)
    with pytest.raises(pk.InputError, match="keep_only_token_ids"):
        pk.export(folder, tmp_path / "onnx", recipe="multivector:tokens", format="onnx")
    assert not (tmp_path / "onnx").exists()


@pytest.mark.parametrize("recipe", ["multivector:tokens/pool2/8", "multivector:tokens/pool3",
                                    "multivector:tokens/8"])  # fmt: skip
def test_export_round_trips_through_the_intended_recipe(base, tmp_path, recipe):
    out = pk.export(base, tmp_path / "mve", recipe=recipe)
    info = pk.model_info(out)
    assert info.multivector == recipe
    for side, texts in (("document", DOCUMENTS), ("query", QUERIES)):
        _same(_embed(texts, out, info.intended_multivector(), side),
              _embed(texts, base, recipe, side))  # fmt: skip


def _inspect(folder: Path, cwd: Path) -> str:
    from clitools import run_cli

    r = run_cli(["inspect", str(folder)], cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode()


def test_inspect_describes_the_token_pipeline(base, tmp_path):
    from sentence_transformers.multi_vector_encoder.modules import HierarchicalTokenPooling

    folder = _variant(base, tmp_path / "mve", pooling=HierarchicalTokenPooling(pool_factor=2),
                      truncate_dim=8)  # fmt: skip
    out = _inspect(folder, tmp_path)
    assert "intended recipe   multivector:tokens/pool2/8 (" in out
    assert "refused" not in out and "guess" not in out and "no file states" not in out
    for module in ("Dense (1_Dense)", "MultiVectorMask (2_MultiVectorMask)",
                   "Normalize (3_Normalize)", "HierarchicalTokenPooling (4_"):  # fmt: skip
        line = next(x for x in out.splitlines() if module in x)
        assert "[applied" in line, line
    assert "Pooling include_prompt" not in out and "prompt tokens     kept" in out
    # A pooling poolkit cannot give: no intended recipe, the module refused with the reason.
    bad = _variant(base, tmp_path / "bad", pooling=HierarchicalTokenPooling(max_tokens=4))
    out = _inspect(bad, tmp_path)
    assert "intended recipe   none: " in out and "max_tokens" in out
    assert "[refused: HierarchicalTokenPooling max_tokens=4" in out


def test_inspect_names_the_pooling_module_that_sets_include_prompt(tmp_path):
    from tiny_models import build_family

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folder = build_family("bert_dense", tmp_path / "st")  # prompts, Pooling in 1_Pooling
    assert "excluded from pooling (Pooling (1_Pooling): include_prompt)" in _inspect(
        folder, tmp_path)  # fmt: skip
    # No Pooling module at all: the wording says so, and names no 1_Pooling.
    (folder / "modules.json").write_text(json.dumps(json.loads(
        (folder / "modules.json").read_text())[:1]), encoding="utf-8")  # fmt: skip
    out = _inspect(folder, tmp_path)
    assert "1_Pooling" not in out
    assert "pooled with the text (no Pooling module states include_prompt" in out


def test_export_without_a_recipe_takes_the_intended_multivector_recipe(base, tmp_path):
    from sentence_transformers.multi_vector_encoder.modules import HierarchicalTokenPooling

    folder = _variant(base, tmp_path / "mve", pooling=HierarchicalTokenPooling(pool_factor=2),
                      truncate_dim=8)  # fmt: skip
    out = pk.export(folder, tmp_path / "exported")
    record = json.loads((out / "poolkit-export.json").read_text(encoding="utf-8"))
    assert record["recipe"] == "multivector:tokens/pool2/8"
    assert record["choice"]["by"] == "intended"
    st = _mve(folder)
    _same(_mve(out).encode_document(DOCUMENTS, convert_to_numpy=True),
          st.encode_document(DOCUMENTS, convert_to_numpy=True))  # fmt: skip
