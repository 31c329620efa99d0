"""What a model folder says about its token vectors: projection, masks, query/document sides.

Three kinds of folder, read without loading sentence-transformers:

- a sentence-transformers ``MultiVectorEncoder`` folder (``model_type: MultiVectorEncoder``):
  the ``Transformer``'s ``query_length``, ``document_length`` and ``query_expansion``
  (``sentence_bert_config.json``), a token-level ``Dense``, the ``MultiVectorMask``
  skiplist and the token-level ``Normalize``; prompts such as ``[Q] ``/``[D] ``;
- a PyLate folder (``model_type: ColBERT``): its ``Dense``, ``query_prefix``/
  ``document_prefix``, ``query_length``, ``document_length``, ``do_query_expansion``,
  ``attend_to_expansion_tokens`` and ``skiplist_words`` (punctuation unless it says
  otherwise), every token L2-normalised, as sentence-transformers loads it;
- any other encoder: its last hidden states, every non-padding token (special tokens
  included, as sentence-transformers' ``output_value="token_embeddings"``), no projection.
"""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poolkit.errors import PipelineError
from poolkit.head import PipelineStep, token_dense

__all__ = [
    "Expansion",
    "LateInteraction",
    "describe_pipeline",
    "folder_recipe",
    "pipeline_modules",
    "read_late_interaction",
]

MVE_MODEL_TYPE = "MultiVectorEncoder"
PYLATE_MODEL_TYPE = "ColBERT"
DOCUMENT_PROMPTS = ("document", "passage", "corpus")


@dataclass(frozen=True)
class Expansion:
    """ColBERT query expansion: queries padded to ``length`` tokens with ``token_id``
    (``[MASK]``), scored by MaxSim; ``attend``: the encoder attends to them too;
    ``strategy``: ``"fixed"`` (``length`` is also the cap) or ``"min"`` (only the floor)."""

    length: int
    token_id: int
    attend: bool = False
    strategy: str = "fixed"


@dataclass(frozen=True)
class LateInteraction:
    """A folder's token-vector pipeline (see the module docstring).

    Attributes:
        source: ``"MultiVectorEncoder folder"``, ``"PyLate folder"`` or ``"encoder"``.
        prompts: prompt texts by name (the ``query``/``document`` prefixes among them).
        query_length, document_length: max tokens per side (``None``: the model's).
        expansion: query expansion, or ``None``.
        skip_ids: token ids dropped from documents (the skiplist, resolved).
        skip_queries: the skiplist applies to queries too.
        keep_ids: the ``MultiVectorMask``'s ``keep_only_token_ids``: documents keep only
            these token ids (``None``: no allowlist).
        steps: token-level ``Dense`` modules, in order.
        normalize: every token vector is L2-normalised after them.
    """

    source: str = "encoder"
    prompts: dict[str, str] = field(default_factory=dict)
    query_length: int | None = None
    document_length: int | None = None
    expansion: Expansion | None = None
    skip_ids: tuple[int, ...] = ()
    skip_queries: bool = False
    keep_ids: tuple[int, ...] | None = None
    steps: tuple[PipelineStep, ...] = ()
    normalize: bool = False

    def width(self, hidden_size: int) -> int:
        """Width of one token vector for a model with ``hidden_size``."""
        return int(self.steps[-1].out_dim) if self.steps else hidden_size  # type: ignore[arg-type]

    def side_prompt(self, side: str) -> str | None:
        """The prompt a side gets by default (sentence-transformers' ``encode_query``/
        ``encode_document``): ``query``, or the first of ``document``/``passage``/``corpus``."""
        for name in ("query",) if side == "query" else DOCUMENT_PROMPTS:
            if name in self.prompts:
                return self.prompts[name] or None
        return None


def _json(path: Path) -> Any:
    if not path.is_file():
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def pipeline_modules(root: Path) -> Iterator[tuple[str, str]]:
    """``(class name, folder relative to root)`` of each module in ``root/modules.json``."""
    for entry in _json(root / "modules.json") or []:
        yield str(entry.get("type", "")).rsplit(".", 1)[-1], str(entry.get("path") or "")


def read_late_interaction(root: str | Path, tokenizer: Any, max_length: int) -> LateInteraction:
    """The :class:`LateInteraction` of the model folder ``root`` (its ``tokenizer``: a
    :class:`poolkit.tokenizer.TextTokenizer`; ``max_length``: the model's)."""
    root = Path(root)
    st = _json(root / "config_sentence_transformers.json")
    kind = st.get("model_type")
    prompts = {k: v for k, v in (st.get("prompts") or {}).items() if isinstance(v, str)}
    if kind not in (MVE_MODEL_TYPE, PYLATE_MODEL_TYPE):
        return LateInteraction(prompts=prompts)
    steps: list[PipelineStep] = []
    normalize = kind == PYLATE_MODEL_TYPE
    transformer_cfg: dict[str, Any] = {}
    skip_words: list[str] | None = None
    skip_tasks = ["document"]
    keep_ids: tuple[int, ...] | None = None
    for name, path in pipeline_modules(root):
        folder = root / path
        if name == "Transformer":
            transformer_cfg = _json(folder / "sentence_bert_config.json")
        elif name == "Dense":
            steps.append(token_dense(folder, f"Dense ({path})"))
            if not steps[-1].applied:
                raise PipelineError(where=f"Dense ({path})", expected="a projection poolkit can "
                                    "apply", got=steps[-1].status)  # fmt: skip
        elif name == "Normalize":
            normalize = True
        elif name == "MultiVectorMask":
            cfg = _json(folder / "config.json")
            skip_words = list(cfg.get("skiplist_words") or [])
            skip_tasks = _tasks(cfg, "skiplist_tasks")
            keep = cfg.get("keep_only_token_ids")
            keep_ids = tuple(sorted({int(i) for i in keep})) if keep else None
    query_length = transformer_cfg.get("query_length")
    document_length = transformer_cfg.get("document_length")
    raw_expansion = transformer_cfg.get("query_expansion")
    if kind == PYLATE_MODEL_TYPE:
        for key, side in (("query_prefix", "query"), ("document_prefix", "document")):
            if key in st:
                prefix = st[key] or ""
                prompts[side] = prefix + (prompts.get(side) or "").removeprefix(prefix)
        document_length = st.get("document_length", document_length)
        skip_words = st.get("skiplist_words")
        if skip_words is None:
            skip_words = list(string.punctuation)
        if st.get("do_query_expansion") is False:
            raw_expansion = None
        else:
            attend = st.get("attend_to_expansion_tokens", st.get("attend_to_mask_tokens"))
            raw_expansion = {"strategy": "fixed", "attend": bool(attend),
                             "length": st.get("query_length") or 32}  # fmt: skip
            query_length = None
    expansion = None
    if raw_expansion:
        token = raw_expansion.get("token")
        if token is None:
            token = _json(root / "tokenizer_config.json").get("mask_token")
        if isinstance(token, dict):
            token = token.get("content")
        vocab = tokenizer.backend_tokenizer
        token_id = vocab.token_to_id(token) if isinstance(token, str) else None
        token_id = tokenizer.eos_token_id if token_id is None else token_id
        expansion = Expansion(int(raw_expansion["length"]), int(token_id),
                              bool(raw_expansion.get("attend", False)),
                              str(raw_expansion.get("strategy", "fixed")))  # fmt: skip
    ids = (tokenizer.backend_tokenizer.token_to_id(w) for w in (skip_words or []))
    skip_ids = tuple(sorted({int(i) for i in ids if i is not None}))
    return LateInteraction(
        source="MultiVectorEncoder folder" if kind == MVE_MODEL_TYPE else "PyLate folder",
        prompts=prompts,
        query_length=query_length,
        document_length=document_length,
        expansion=expansion,
        skip_ids=skip_ids,
        skip_queries="query" in skip_tasks,
        keep_ids=keep_ids,
        steps=tuple(steps),
        normalize=normalize,
    )


def folder_recipe(root: str | Path) -> tuple[str | None, str]:
    """The multi-vector recipe a ``MultiVectorEncoder``/PyLate folder ``root`` intends, and
    where it says so: ``multivector:tokens``, with ``/poolF`` from its
    ``HierarchicalTokenPooling`` and ``/DIMS`` from ``config_sentence_transformers.json``'s
    ``truncate_dim`` (``/l2`` with it when the folder has no ``Normalize``: sentence-
    transformers L2-normalises truncated tokens). ``(None, "")`` for any other folder;
    ``(None, reason)`` when poolkit cannot give what the folder's modules do (the reason is
    one line naming the setting and the fix)."""
    root = Path(root)
    st = _json(root / "config_sentence_transformers.json")
    kind = st.get("model_type")
    if kind not in (MVE_MODEL_TYPE, PYLATE_MODEL_TYPE):
        return None, ""
    normalized = kind == PYLATE_MODEL_TYPE
    pool: float | None = None
    said = [f"config_sentence_transformers.json: model_type {kind}"]
    for name, path in pipeline_modules(root):
        if name == "Normalize":
            normalized = True
        elif name == "HierarchicalTokenPooling":
            cfg = _json(root / path / "config.json")
            factor, problem = _pool_setting(cfg, normalized)
            if problem:
                return None, f"{path}/config.json: {problem}"
            pool = factor
            if factor is not None:
                said.append(f"{path}: HierarchicalTokenPooling pool_factor {factor:g}")
    dims = st.get("truncate_dim")
    recipe = "multivector:tokens"
    if pool is not None:
        recipe += f"/pool{pool:g}"
    if isinstance(dims, int) and not isinstance(dims, bool) and dims > 0:
        if not normalized and pool is not None:
            return None, ("truncate_dim with HierarchicalTokenPooling on tokens that are not "
                          "L2-normalised first: poolkit normalises before it pools; add a "
                          "Normalize module before the pooling, or embed "
                          f"{recipe}/raw and truncate the vectors yourself.")  # fmt: skip
        recipe += ("" if normalized else "/l2") + f"/{dims}"
        said.append(f"truncate_dim {dims}")
    return recipe, "; ".join(said)


def describe_pipeline(root: str | Path) -> list[tuple[str, str]]:
    """``(module, what it does [status])`` of a ``MultiVectorEncoder``/PyLate folder's token
    pipeline, for ``poolkit inspect`` (no weights loaded; ``[]`` for other folders)."""
    root = Path(root)
    st = _json(root / "config_sentence_transformers.json")
    kind = st.get("model_type")
    if kind not in (MVE_MODEL_TYPE, PYLATE_MODEL_TYPE):
        return []
    rows: list[tuple[str, str]] = []
    normalized = kind == PYLATE_MODEL_TYPE
    for name, path in pipeline_modules(root):
        label = f"{name} ({path or 'root'})"
        cfg = _json(root / path / ("sentence_bert_config.json" if name == "Transformer"
                                   else "config.json"))  # fmt: skip
        if name == "Transformer":
            sides = cfg if kind == MVE_MODEL_TYPE else st  # the query/document settings
            parts = ["token vectors"]
            if sides.get("query_length"):
                parts.append(f"queries {sides['query_length']} tokens")
            if sides.get("document_length"):
                parts.append(f"documents {sides['document_length']} tokens")
            exp = sides.get("query_expansion")
            if kind == PYLATE_MODEL_TYPE and sides.get("do_query_expansion", True):
                exp = {"length": sides.get("query_length") or 32, "strategy": "fixed"}
            if exp:
                parts.append(f"queries expanded with [MASK] to {exp.get('length')} "
                             f"({exp.get('strategy', 'fixed')})")  # fmt: skip
            rows.append((label, "; ".join(parts) + " [input]"))
        elif name == "Dense":
            step = token_dense(root / path, label, weights=False)
            rows.append((label, f"{step.what}, on every token [{step.status}]"))
        elif name == "Normalize":
            normalized = True
            rows.append((label, "L2 per token [applied]"))
        elif name == "MultiVectorMask":
            text = "the scoring mask (query expansion tokens count)"
            if words := cfg.get("skiplist_words"):
                tasks = " and ".join(_tasks(cfg, "skiplist_tasks"))
                text += f"; skiplist of {len(words)} words on {tasks}s"
            if keep := cfg.get("keep_only_token_ids"):
                text += f"; documents keep only token ids {list(keep)}"
            rows.append((label, text + " [applied]"))
        elif name == "HierarchicalTokenPooling":
            factor, problem = _pool_setting(cfg, normalized)
            what = (f"documents: Ward clustering, pool_factor {cfg.get('pool_factor', 1)}, "
                    f"{cfg.get('num_protected_tokens', 1)} protected token(s)")  # fmt: skip
            status = f"refused: {problem}" if problem else (
                f"applied: /pool{factor:g}" if factor is not None else "no-op")  # fmt: skip
            rows.append((label, f"{what} [{status}]"))
        else:
            rows.append((label, "[refused: poolkit does not know this module]"))
    if kind == PYLATE_MODEL_TYPE:  # sentence-transformers adds both when it loads the folder
        words = st.get("skiplist_words")
        count = len(string.punctuation) if words is None else len(words)
        rows.append(("skiplist (PyLate)", f"drops {count} words from documents [applied]"))
        rows.append(("Normalize (PyLate)", "L2 per token [applied]"))
    return rows


def _tasks(cfg: dict[str, Any], key: str) -> list[str]:
    tasks = cfg.get(key) or ["document"]
    return [tasks] if isinstance(tasks, str) else list(tasks)


def _pool_setting(cfg: dict[str, Any], normalized: bool) -> tuple[float | None, str]:
    """``(pool factor or None, "")`` of a ``HierarchicalTokenPooling`` config poolkit's
    :func:`~poolkit.multivector.pool_tokens` reproduces, else ``(None, why not)``."""
    factor = float(cfg.get("pool_factor", 1.0))
    tasks = _tasks(cfg, "tasks")
    fix = "poolkit pools documents only, by pool_factor, one protected token, L2 after"
    for key, ok in (("max_tokens", cfg.get("max_tokens") is None),
                    ("distance_threshold", cfg.get("distance_threshold") is None),
                    ("num_protected_tokens", cfg.get("num_protected_tokens", 1) == 1),
                    ("tasks", tasks == ["document"]),
                    ("normalize_embeddings", factor <= 1
                     or bool(cfg.get("normalize_embeddings", False)))):  # fmt: skip
        if not ok:
            return None, (f"HierarchicalTokenPooling {key}={cfg.get(key)!r} is not one poolkit "
                          f"gives ({fix}); set it so, or pool the vectors of multivector:tokens "
                          "yourself.")  # fmt: skip
    if factor <= 1:
        if cfg.get("normalize_embeddings") and not normalized:  # documents only: no recipe says it
            return None, ("HierarchicalTokenPooling pool_factor 1 only L2-normalises documents, "
                          "not queries; add a Normalize module, or drop the pooling module.")  # fmt: skip
        return None, ""
    return factor, ""
