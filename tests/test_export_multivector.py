"""``poolkit export`` of a multi-vector recipe: the ``MultiVectorEncoder`` folder loads in
sentence-transformers and its ``encode_query``/``encode_document`` give ``poolkit.embed``'s
token vectors; the ONNX token graph, run with bare onnxruntime and tokenizers, gives them
too; what a format cannot hold is refused in one line before anything is written.

Sources: tiny random ``MultiVectorEncoder`` folders of two architectures (BERT with fixed
query expansion, RoBERTa with attended ``min`` expansion), a PyLate-format folder and a
plain BERT encoder (no projection), as tests/test_multivector.py builds them.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from clitools import one_error_line, run_cli
from equality import RUNTIME_BOUND
from tiny_models import build_family, build_multivector, pylate_folder

import poolkit as pk
from poolkit.errors import InputError

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
TOL = RUNTIME_BOUND  # docs/equality.md: another runtime against torch


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mv-export")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = {n: build_multivector(n, root / n) for n in ("bert_dense", "roberta")}
        out["pylate"] = pylate_folder(out["bert_dense"], root / "pylate")
        out["plain"] = build_family("bert_dense", root / "plain")
    return out


def _embed(texts: list[str], model: Path, recipe: str, side: str) -> list[np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pk.TruncationWarning)
        return pk.embed(texts, model=model, recipe=recipe, prompt_name=side)


def _same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        b = b.numpy() if hasattr(b, "numpy") else np.asarray(b)
        assert a.shape == b.shape, (a.shape, b.shape)
        np.testing.assert_allclose(a, b, atol=TOL, rtol=0)


def _mve(path: Path):
    from sentence_transformers import MultiVectorEncoder

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MultiVectorEncoder(str(path), device="cpu")


def _record(folder: Path) -> dict:
    return json.loads((folder / "poolkit-export.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("name", "recipe"),
    [
        ("bert_dense", "multivector:tokens"),
        ("bert_dense", "multivector:tokens/8"),
        ("roberta", "multivector:tokens/pool2"),
        ("pylate", "multivector:tokens"),
        ("plain", "multivector:tokens"),
        ("plain", "multivector:tokens/pool2/l2"),
    ],
)
def test_mve_folder_gives_embeds_token_vectors(sources, name, recipe, tmp_path):
    out = pk.export(sources[name], tmp_path / "mve", recipe=recipe)
    st = _mve(out)
    _same(st.encode_query(QUERIES, convert_to_numpy=True),
          _embed(QUERIES, sources[name], recipe, "query"))  # fmt: skip
    _same(st.encode_document(DOCUMENTS, convert_to_numpy=True),
          _embed(DOCUMENTS, sources[name], recipe, "document"))  # fmt: skip
    record = _record(out)
    assert record["recipe"] == recipe and record["format"] == "sentence-transformers"
    assert ("Dense" in record["modules"]) == (name != "plain")  # a plain encoder: no projection
    assert ("HierarchicalTokenPooling" in record["modules"]) == ("pool" in recipe)
    assert recipe in (out / "README.md").read_text(encoding="utf-8")


def test_mve_folder_equals_the_source_folder_with_the_same_settings(sources, tmp_path):
    """Independent of poolkit.embed: the exported folder against the source folder loaded by
    sentence-transformers with the recipe's pooling and width as encode arguments."""
    from sentence_transformers.multi_vector_encoder.modules import HierarchicalTokenPooling

    out = pk.export(sources["bert_dense"], tmp_path / "mve", recipe="multivector:tokens/pool2/8")
    src, exported = _mve(sources["bert_dense"]), _mve(out)
    pooling = HierarchicalTokenPooling(pool_factor=2)
    _same(exported.encode_document(DOCUMENTS, convert_to_numpy=True),
          src.encode_document(DOCUMENTS, convert_to_numpy=True, token_pooling=pooling,
                              truncate_dim=8))  # fmt: skip
    _same(exported.encode_query(QUERIES, convert_to_numpy=True),
          src.encode_query(QUERIES, convert_to_numpy=True, truncate_dim=8))  # fmt: skip


def _bare_onnx(folder: Path, texts: list[str], query: bool) -> list[np.ndarray]:
    """The folder as a server runs it: onnxruntime and tokenizers, nothing of poolkit."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    record = _record(folder)
    side = "query" if query else "document"
    tok = Tokenizer.from_file(str(folder / record["onnx"]["tokenizers"][side]))
    prompt = record["multivector"]["prompts"][side]
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    enc = tok.encode_batch([prompt + t for t in texts])
    feed = {
        "input_ids": [e.ids for e in enc],
        "attention_mask": [e.attention_mask for e in enc],
        "token_type_ids": [e.type_ids for e in enc],
        "is_query": [int(query)],
    }
    feed = {k: np.array(v, dtype=np.int64) for k, v in feed.items() if k in names}
    vectors, mask = session.run(["token_embeddings", "token_mask"], feed)
    assert vectors.shape[:2] == mask.shape and vectors.dtype == np.float32
    assert not vectors[mask == 0].any()  # the rows not kept are zeros
    return [v[m == 1] for v, m in zip(vectors, mask, strict=True)]


@pytest.mark.parametrize(
    ("name", "recipe"),
    [
        ("bert_dense", "multivector:tokens"),
        ("roberta", "multivector:tokens/8"),
        ("pylate", "multivector:tokens/raw/8"),
        ("plain", "multivector:tokens/l2"),
    ],
)
def test_onnx_token_graph_gives_embeds_token_vectors(sources, name, recipe, tmp_path):
    out = pk.export(sources[name], tmp_path / "onnx", recipe=recipe, format="onnx")
    for side, texts in (("query", QUERIES), ("document", DOCUMENTS)):
        want = _embed(texts, sources[name], recipe, side)
        _same(_bare_onnx(out, texts, side == "query"), want)
        # One text at a time: no batch-mate changes a text's vectors.
        _same([_bare_onnx(out, [t], side == "query")[0] for t in texts], want)
    record = _record(out)
    differ = name != "plain"  # expansion or a documents-only skiplist: the graph needs the side
    assert ("is_query" in record["onnx"]["inputs"]) == differ
    assert record["agreement"]["max_abs_diff"] <= TOL
    assert record["output_dim"] == (8 if recipe.endswith("/8") else 32 if name == "plain" else 16)


@pytest.mark.parametrize(
    ("recipe", "fmt", "needle"),
    [
        ("multivector:tokens/pool2", "onnx", "Use `format='sentence-transformers'`"),
        ("multivector:tokens/muvera:k_sim=3", "onnx", "muvera_encode"),
        ("multivector:tokens/muvera", "sentence-transformers", "k_sim=5,dim_proj=16"),
        ("multivector:tokens/float16", "onnx", "poolkit.output.quantize"),
        ("multivector:tokens/raw/8", "sentence-transformers", "truncate_dim"),
    ],
)
def test_what_a_format_cannot_hold_is_refused_before_the_model_loads(recipe, fmt, needle,
                                                                     tmp_path):  # fmt: skip
    # The model does not even exist: the recipe is refused first, and nothing is written.
    with pytest.raises(InputError, match=needle) as e:
        pk.export(tmp_path / "no-model", tmp_path / "out", recipe=recipe, format=fmt)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "out").exists()


def test_refusals_that_need_the_model_write_nothing(sources, tmp_path):
    # The plain encoder does not normalise: /8 would be unnormalised, truncate_dim is not.
    with pytest.raises(InputError, match="truncate_dim"):
        pk.export(sources["plain"], tmp_path / "out", recipe="multivector:tokens/8")
    with pytest.raises(InputError, match="`quantize`"):
        pk.export(sources["plain"], tmp_path / "out", recipe="multivector:tokens",
                  format="onnx", quantize="int8")  # fmt: skip
    assert not (tmp_path / "out").exists()
    assert not list(tmp_path.iterdir())  # no temporary folder left either


def test_cli_exports_and_refuses(sources, tmp_path):
    model = str(sources["roberta"])
    r = run_cli(["export", model, "-o", "onnx", "--format", "onnx", "--recipe",
                 "multivector:tokens"], cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert b"multivector:tokens (16 dims, normalised) as onnx" in r.stderr
    _same(_bare_onnx(tmp_path / "onnx", DOCUMENTS, False),
          _embed(DOCUMENTS, sources["roberta"], "multivector:tokens", "document"))  # fmt: skip
    r = run_cli(["export", "-m", model, "-o", "mve", "--recipe", "multivector:tokens/pool2",
                 "--quiet"], cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    _same(_mve(tmp_path / "mve").encode_document(DOCUMENTS, convert_to_numpy=True),
          _embed(DOCUMENTS, sources["roberta"], "multivector:tokens/pool2", "document"))  # fmt: skip
    r = run_cli(["export", model, "-o", "refused", "--format", "onnx", "--recipe",
                 "multivector:tokens/pool2"], cwd=tmp_path)  # fmt: skip
    line = one_error_line(r, 2)
    assert line.startswith(
        "poolkit: error: Expected --recipe to be one without /poolF with --format onnx"
    )
    assert "Use --format sentence-transformers, whose HierarchicalTokenPooling" in line
    assert not (tmp_path / "refused").exists()


def test_a_multivector_top_row_of_compare_is_exported(sources, tmp_path):
    """compare --task retrieval ranks MaxSim rows beside dense ones; a MaxSim row on top is
    exported as a MultiVectorEncoder folder, a MUVERA row on top is refused in one line."""
    rows = [
        {"recipe": "multivector:tokens/pool2", "ndcg_at_10": 0.61},
        {"recipe": "mean", "intended": True, "ndcg_at_10": 0.52},
    ]
    doc = {"model": str(sources["bert_dense"]), "task": "retrieval", "metric": "ndcg_at_10",
           "results": rows}  # fmt: skip
    (tmp_path / "r.json").write_text(json.dumps(doc))
    out = pk.export(sources["bert_dense"], tmp_path / "best", from_compare=tmp_path / "r.json")
    record = _record(out)
    assert record["recipe"] == "multivector:tokens/pool2" and record["choice"]["value"] == 0.61
    assert "HierarchicalTokenPooling" in record["modules"]
    _same(_mve(out).encode_document(DOCUMENTS, convert_to_numpy=True),
          _embed(DOCUMENTS, sources["bert_dense"], "multivector:tokens/pool2", "document"))  # fmt: skip
    rows[0]["recipe"] = "multivector:tokens/muvera"
    (tmp_path / "r.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="muvera_encode"):
        pk.export(sources["bert_dense"], tmp_path / "muvera", from_compare=tmp_path / "r.json")
    assert not (tmp_path / "muvera").exists()
