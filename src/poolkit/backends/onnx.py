"""ONNX Runtime backend: export a Hugging Face encoder once, cache it, run it on the CPU.

The export is cached under ``<cache>/onnx/<key>/`` where ``key`` hashes the model's weight and
config files together with every setting that changes the exported graph (opset, int8, optimiser,
library versions); ``settings.json`` beside ``model.onnx`` records those settings and the result
of the correctness check. A cache entry is only published (atomic rename of a finished folder)
after the exported graph has been checked against the torch model on padded batches of several
shapes, left and right padded, so a cached model is always a checked one. Every load checks
the entry's files against their hashes in ``settings.json`` (:func:`verified_record`), so a
damaged export is rebuilt, never run.

Why the export needs care: a BERT traced on one batch can bake data-dependent Python branches
into the graph. Older ``transformers`` dropped the attention mask when the traced batch had no
padding (``torch.all(mask == 1)`` evaluated once at trace time), so every later padded batch
attended to its padding (max abs error ~0.4). We export with eager attention, trace on a batch
that *is* padded, declare batch and sequence axes dynamic, and verify before use.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import logging
import os
import shutil
import time
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from poolkit._cache import cache_root
from poolkit._config import config_int
from poolkit._cpus import available_cpus
from poolkit._errors import missing_extra, type_error, value_error
from poolkit.backends.rowquant import quantize_rows
from poolkit.errors import ExportError, MissingDependencyError, OutputExistsError, PoolkitError
from poolkit.io.atomic import AtomicDir
from poolkit.io.integrity import IntegrityWarning, fast_file_digest

__all__ = [
    "OnnxBackend",
    "OnnxRunner",
    "load_onnx_runner",
    "onnx_cache_root",
    "runtime_tokenizer",
]

# Bump when the export recipe changes, so old cache entries are not reused.
_FORMAT = 4  # 2: files hashed (SHA-256); 3: int8 with per-row activations; 4: XXH3-128
# Shared with ``poolkit export``, which traces, checks and quantises with the same settings.
OPSET = 17
FP32_TOL = 1e-4  # max abs diff of last_hidden_state on real positions vs torch
INT8_MIN_COS = 0.97  # mean per-token cosine vs torch; int8 is approximate by design
# (batch, length, padding side) of the check batches: single text, mixed lengths both sides.
CHECK_SHAPES: tuple[tuple[int, int, str], ...] = (
    (1, 7, "right"),
    (3, 19, "right"),
    (4, 11, "left"),
    (2, 40, "left"),
    (5, 64, "right"),
)


def require(module: str, feature: str, extra: str) -> Any:
    """``import module``, or MissingDependencyError naming ``feature`` and the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependencyError(missing_extra(feature, module, extra)) from exc


def require_onnx() -> None:
    """Raise MissingDependencyError (naming the extra) unless onnxruntime and onnx import."""
    _import_ort()
    _import_onnx()


def _import_ort() -> Any:
    ort = require("onnxruntime", "The ONNX backend", "onnx")
    require("xxhash", "The ONNX backend", "onnx")  # hashes the cache on every load
    return ort


def _import_onnx() -> Any:
    return require("onnx", "Exporting to ONNX", "onnx")


def check_threads(threads: Any) -> None:
    """A runner's ``threads``: a positive int, or None (every CPU this process may use)."""
    if threads is not None and (
        not isinstance(threads, int) or isinstance(threads, bool) or threads < 1
    ):
        value_error("threads", "a positive int or None", repr(threads), "Pass e.g. threads=2.")


def onnx_cache_root(cache_dir: str | os.PathLike[str] | None = None, kind: str = "onnx") -> Path:
    """Folder holding cached exports: ``cache_dir``, else ``$POOLKIT_CACHE``, else
    ``~/.cache/poolkit``, plus ``/<kind>`` (``onnx``; ``openvino`` for its converted models)."""
    return cache_root(cache_dir) / kind


class Runner(ABC):
    """What a runner of an exported encoder shares (:class:`OnnxRunner`,
    :class:`~poolkit.backends.openvino.OpenVinoRunner`): its settings and the call.

    Call it with ``input_ids`` and ``attention_mask`` (both ``(B, L)`` integer arrays, mask 1 for
    real tokens, any padding side) and ``token_type_ids`` (``(B, L)``, zeros if omitted) when the
    graph takes them. Returns ``(B, L, H)`` float32 NumPy (the graph's output; an exported
    pipeline's ``sentence_embedding`` is ``(B, D)``). Padding positions hold finite values
    that mean nothing; a padding-only row gives a finite, meaningless row (pool with the core
    functions, which reject or zero such rows). ``settings`` is the cache entry's record.
    """

    input_names: tuple[str, ...]
    shown = "quantize"  # the setting __repr__ names

    def __init__(
        self, path: str | os.PathLike[str], threads: int | None, settings: dict[str, Any] | None
    ) -> None:
        check_threads(threads)
        self.path = Path(path)
        self.settings: dict[str, Any] = dict(settings or {})
        self.threads = threads or available_cpus()
        self.max_length: int | None = self.settings.get("max_position_embeddings")

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(path={str(self.path)!r}, "
                f"{self.shown}={self.settings.get(self.shown)!r}, threads={self.threads})")  # fmt: skip

    def __call__(
        self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None
    ) -> np.ndarray:
        feed = checked_feed(self, input_ids, attention_mask, token_type_ids)
        ids = feed["input_ids"]
        if ids.shape[0] == 0:
            return np.zeros(
                (0, ids.shape[1], int(self.settings.get("hidden_size", 0))), dtype=np.float32
            )
        return np.asarray(self._infer(feed), dtype=np.float32)

    @abstractmethod
    def _infer(self, feed: dict[str, np.ndarray]) -> Any: ...


class OnnxRunner(Runner):
    """Runs an exported encoder with ONNX Runtime: token ids in, ``last_hidden_state`` (or
    the graph's ``output``) out; called as :class:`Runner`."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        threads: int | None = None,
        settings: dict[str, Any] | None = None,
        output: str = "last_hidden_state",
    ) -> None:
        ort = _import_ort()
        super().__init__(path, threads, settings)
        self.output = output
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.threads
        # One graph, run op by op: a second pool would only fight the first for the same cores.
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(
            str(self.path), opts, providers=["CPUExecutionProvider"]
        )
        self.input_names = tuple(i.name for i in self.session.get_inputs())

    def _infer(self, feed: dict[str, np.ndarray]) -> Any:
        return self.session.run([self.output], feed)[0]


def checked_feed(
    runner: Any, input_ids: Any, attention_mask: Any, token_type_ids: Any = None
) -> dict[str, np.ndarray]:
    """The graph's int64 inputs (those named in ``runner.input_names``), each checked to be a
    ``(B, L)`` integer array of one shape, at most ``runner.max_length`` long;
    ``token_type_ids`` zeros when the graph takes them and none are given."""
    ids = _as_ids("input_ids", input_ids)
    mask = _as_ids("attention_mask", attention_mask)
    if mask.shape != ids.shape:
        value_error("attention_mask", f"of the shape of input_ids {ids.shape}", mask.shape)
    if runner.max_length is not None and ids.shape[1] > runner.max_length:
        value_error(
            "input_ids",
            f"at most {runner.max_length} tokens long (the model's position limit)",
            f"length {ids.shape[1]}",
            "Truncate to max_length.",
        )
    feed = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in runner.input_names:
        if token_type_ids is None:
            feed["token_type_ids"] = np.zeros_like(ids)
        else:
            tt = _as_ids("token_type_ids", token_type_ids)
            if tt.shape != ids.shape:
                value_error("token_type_ids", f"of the shape of input_ids {ids.shape}", tt.shape)
            feed["token_type_ids"] = tt
    feed = {k: v for k, v in feed.items() if k in runner.input_names}
    return feed


def runtime_tokenizer(encoder: Any) -> Any:
    """The Encoder's own tokenizer as a bare ``tokenizers.Tokenizer``, with poolkit's
    template, truncation (the encoder's max length) and right padding baked in, so bare
    ``tokenizers`` gives the ids poolkit feeds the model."""
    from tokenizers import Tokenizer
    from tokenizers.processors import TemplateProcessing

    tok = Tokenizer.from_str(encoder.tokenizer.backend_tokenizer.to_str())
    names = encoder.tokenizer.convert_ids_to_tokens
    template = encoder.special_tokens
    prefix = [names(i) for i in template.prefix]
    suffix = [names(i) for i in template.suffix]
    framing = template.prefix + template.suffix
    specials = {t: i for t, i in zip(prefix + suffix, framing, strict=True)}
    tok.post_processor = TemplateProcessing(
        single=" ".join([*prefix, "$A", *suffix]),
        special_tokens=sorted(specials.items(), key=lambda kv: kv[1]),
    )
    tok.no_truncation()
    tok.enable_truncation(max_length=encoder.max_length)
    pad = template.pad_id
    tok.enable_padding(pad_id=pad, pad_token=names(pad) or "")
    return tok


def _as_ids(name: str, value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # torch tensor: host copy without importing torch here
        value = value.detach().cpu().numpy()
    arr = np.asarray(value)
    if arr.ndim != 2:
        value_error(name, "a 2-D (B, L) array", f"shape {arr.shape}")
    if arr.dtype.kind not in "iub":
        type_error(name, "an integer array", f"dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=np.int64)


# --------------------------------------------------------------------------- cache + export


def transformer_dir(model_dir: str | os.PathLike[str]) -> Path:
    """The folder holding the Hugging Face model: ``model_dir`` itself or the path its ``modules.json`` gives."""
    root = Path(model_dir)
    if not root.is_dir():
        value_error(
            "model_dir",
            "an existing model folder",
            repr(str(model_dir)),
            "Pass the folder that holds config.json.",
        )
    modules = root / "modules.json"
    if modules.is_file():
        for mod in json.loads(modules.read_text(encoding="utf-8")):
            if str(mod.get("type", "")).endswith("Transformer") and mod.get("path"):
                root = root / mod["path"]
                break
    if not (root / "config.json").is_file():
        value_error(
            "model_dir",
            "a folder with a Hugging Face config.json",
            repr(str(model_dir)),
            "Pass a local model folder.",
        )
    return root


def _weight_files(hf_dir: Path) -> list[Path]:
    files = sorted(
        p
        for p in hf_dir.iterdir()
        if p.is_file() and (p.suffix in (".safetensors", ".bin") or p.name.endswith(".index.json"))
    )
    return [hf_dir / "config.json", *files]


def cache_settings(
    hf_dir: Path, quantize: str | None = None, optimize: bool = False
) -> dict[str, Any]:
    """The settings (and so the cache key) of the export of ``hf_dir``."""
    # Versions from package metadata: a cache hit must not pay for importing torch. Source
    # files hashed with XXH3-128 like the entry's own files: every load computes this key
    # (SHA-256 of MiniLM's 90 MB weights took 55 ms of a ~230 ms load; XXH3 takes 4 ms).
    from importlib.metadata import version

    config = json.loads((hf_dir / "config.json").read_text(encoding="utf-8"))
    return {
        "format": _FORMAT,
        "opset": OPSET,
        "attention": "eager",
        "quantize": quantize,
        "optimize": optimize,
        "model_files": {p.name: fast_file_digest(p) for p in _weight_files(hf_dir)},
        "hidden_size": config_int(config, "hidden_size"),
        "max_position_embeddings": config.get("max_position_embeddings"),
        "versions": {
            name: version(name) for name in ("torch", "transformers", "onnxruntime", "onnx")
        },
    }


def entry_key(settings: dict[str, Any]) -> str:
    """A cache entry's name: a hash of the settings it depends on (widths are read from
    the weights, so they are left out), shared by the ONNX and OpenVINO caches."""
    blob = json.dumps(
        {k: v for k, v in settings.items() if k not in ("hidden_size", "max_position_embeddings")},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def load_onnx_runner(
    model_dir: str | os.PathLike[str],
    *,
    quantize: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    threads: int | None = None,
    optimize: bool = False,
) -> OnnxRunner:
    """Build (first call) or load (later calls) the ONNX export of a local model and return its runner.

    ``model_dir``: a Hugging Face or sentence-transformers model folder. ``quantize``: ``None``
    (fp32) or ``"int8"`` (dynamic int8 weights and activations of the matrix products).
    ``cache_dir``: root of the cache (default ``$POOLKIT_CACHE`` or ``~/.cache/poolkit``).
    ``threads``: ORT intra-op threads (default: the cores this process may use). ``optimize``:
    fuse attention/layer-norm/GELU with ORT's transformer optimiser (falls back to the plain
    graph if fusion fails or fails the check; ``settings["fused"]`` records which). Off by
    default: on our 2-core AVX-512 CPU the fused graph was slower on short texts (465 vs 552
    texts/s per core on STS-B) and equal on long ones; ORT's own load-time fusions suffice.
    A missing entry is exported, checked against torch and published (:func:`cached_record`);
    a failed check raises :class:`ExportError` and caches nothing.
    """
    _import_ort()
    if quantize not in (None, "int8"):
        value_error(
            "quantize",
            "None or 'int8'",
            repr(quantize),
            "Use quantize='int8' or leave it out for fp32.",
        )
    if not isinstance(optimize, bool):
        type_error("optimize", "a bool", repr(optimize))
    hf_dir = transformer_dir(model_dir)
    settings = cache_settings(hf_dir, quantize, optimize)
    entry = onnx_cache_root(cache_dir) / entry_key(settings)
    record = cached_record(entry, "model.onnx", lambda work: _build(hf_dir, settings, work,
                           cache_dir), ExportError, "ONNX export")  # fmt: skip
    return OnnxRunner(entry / "model.onnx", threads=threads, settings=record)


def cached_record(
    entry: Path, main: str, build: Callable[[Path], dict[str, Any]], error: type[PoolkitError],
    what: str,
) -> dict[str, Any]:  # fmt: skip
    """``settings.json`` of cache ``entry`` (:func:`verified_record`), built first where it is
    absent or damaged: ``build(work)`` writes the files into the empty folder ``work`` and
    returns their record, published with the build's duration (:func:`publish`) unless
    another process published the entry meanwhile (theirs is as good as ours). ``error``
    names the entry (``what``) when it changed while it was published."""
    record = verified_record(entry, main)
    if record is None:
        entry.parent.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        try:
            folder: AtomicDir | None = AtomicDir(entry)
        except OutputExistsError:
            folder = None
        if folder is not None:
            try:
                built = build(folder.tmp)
                built["build_seconds"] = round(time.perf_counter() - started, 2)
                publish(folder, built)
            finally:
                folder.abort()  # nothing left once published
        record = verified_record(entry, main)
    if record is None:
        raise error(where=entry, expected=f"the {what} unchanged while it was published",
                    got="it changed")  # fmt: skip
    return record


_RUNTIME = {"onnx": "ONNX", "openvino": "OpenVINO"}  # cache folder -> the name in messages


def verified_record(entry: Path, main: str) -> dict[str, Any] | None:
    """``settings.json`` of cache entry ``entry`` if every file matches its recorded hash
    (``main``, the model file, must be among them); None if the entry is absent, or was
    damaged and has been removed (one :class:`IntegrityWarning` naming the file).

    Each file is hashed with XXH3-128 through a memory map (4 ms for 90 MB; see
    :mod:`poolkit.io.integrity`) before the runtime reads it from the page cache.
    """
    if not entry.exists():
        return None
    record: dict[str, Any] = {}
    damaged: Path | None = entry / "settings.json"
    with contextlib.suppress(OSError, ValueError):
        record = json.loads(damaged.read_text(encoding="utf-8"))  # type: ignore[union-attr]
    files = record.get("files") if isinstance(record, dict) else None
    if isinstance(files, dict) and main in files:
        damaged = next((entry / n for n, d in sorted(files.items()) if not _intact(entry / n, d)),
                       None)  # fmt: skip
    if damaged is not None:
        warnings.warn(
            f"{damaged}: damaged {_RUNTIME.get(entry.parent.name, entry.parent.name)} cache file (missing, unreadable, or its "
            "content does not match the hash recorded when it was built); rebuilding the "
            "cache entry.",
            IntegrityWarning,
            stacklevel=4,
        )
        trash = entry.with_name(f".broken-{entry.name}-{os.getpid()}-{os.urandom(4).hex()}")
        with contextlib.suppress(OSError):
            entry.rename(trash)  # gone under its name at once; another process may race us
        shutil.rmtree(trash, ignore_errors=True)
        return None
    return record


def _intact(path: Path, digest: str) -> bool:
    try:
        return fast_file_digest(path) == digest
    except (OSError, ValueError):
        return False


def _build(
    hf_dir: Path, settings: dict[str, Any], work: Path, cache_dir: str | os.PathLike[str] | None
) -> dict[str, Any]:
    _import_onnx()
    fp32_path = None
    if settings["quantize"] is not None:
        # int8 starts from the (cached, checked) fp32 export of the same model and settings.
        fp32_path = load_onnx_runner(
            hf_dir, quantize=None, cache_dir=cache_dir, optimize=settings["optimize"]
        ).path
    model = load_torch(hf_dir)
    record = dict(settings)
    if fp32_path is not None:
        quantize_int8(fp32_path, work / "model.onnx")
        record["check"] = _check(model, work / "model.onnx", settings)
        return record
    _export(model, work / "raw.onnx")
    record["fused"] = False
    if settings["optimize"]:
        try:
            _fuse(model.config, work / "raw.onnx", work / "model.onnx")
            record["check"] = _check(model, work / "model.onnx", settings)
            record["fused"] = True
        except Exception as exc:  # fusion is an optimisation: fall back to the plain graph
            record["fuse_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if not record["fused"]:
        os.replace(work / "raw.onnx", work / "model.onnx")
        record["check"] = _check(model, work / "model.onnx", settings)
    (work / "raw.onnx").unlink(missing_ok=True)
    return record


def publish(build: AtomicDir, record: dict[str, Any]) -> None:
    """Record the hash of every file of the finished folder in its ``settings.json`` (with
    ``record``) and publish it as the cache entry in one step (:meth:`AtomicDir.commit`)."""
    work = build.tmp
    record["files"] = {p.name: fast_file_digest(p) for p in sorted(work.iterdir()) if p.is_file()}
    (work / "settings.json").write_text(json.dumps(record, indent=2, sort_keys=True),
                                        encoding="utf-8")  # fmt: skip
    try:
        build.commit()
    except OSError:
        # Another process published the same entry first; theirs is as good as ours.
        if not (build.path / "settings.json").is_file():
            raise


def load_torch(hf_dir: Path) -> Any:
    """The Hugging Face model of ``hf_dir`` in float32 with eager attention, in eval mode."""
    import torch
    from transformers import AutoModel

    from poolkit._quiet import quiet_loading

    # Eager attention: its mask arithmetic traces into plain graph ops for any padding.
    from poolkit.backends.pytorch import model_class

    with quiet_loading():  # T5-like: the encoder alone, as the torch backend loads it
        model = model_class(hf_dir, AutoModel).from_pretrained(
            str(hf_dir), attn_implementation="eager", dtype=torch.float32
        )
    return model.eval()


def _export(model: Any, path: Path) -> None:
    import torch

    takes_types = getattr(model.config, "type_vocab_size", 0) > 0

    class HiddenOnly(torch.nn.Module):  # named int64 inputs, one output
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if takes_types:
                kwargs["token_type_ids"] = token_type_ids
            return self.model(**kwargs).last_hidden_state

    trace_to_onnx(HiddenOnly().eval(), model.config.vocab_size, takes_types,
                  {"last_hidden_state": {0: "batch", 1: "sequence"}}, path)  # fmt: skip


def trace_to_onnx(
    module: Any, vocab: int, takes_types: bool, outputs: dict[str, dict[int, str]], path: Path,
    *, is_query: bool = False,
) -> list[str]:  # fmt: skip
    """Write ``module`` (int64 ``input_ids``, ``attention_mask`` [, ``token_type_ids``], each
    ``(batch, sequence)`` [, ``is_query`` ``(1,)``]) as an ONNX graph at ``path``; returns
    its input names.

    Traced on a right-padded batch (queries, with ``is_query``) with batch and sequence axes
    dynamic, at opset :data:`OPSET`; ``outputs``: each output's name and dynamic axes. The
    cache's exports and ``poolkit export``'s graphs all come through here.
    """
    import torch

    ids, mask = (torch.from_numpy(a) for a in _padded_batch(2, 8, "right", vocab, seed=0))
    names = ["input_ids", "attention_mask"] + (["token_type_ids"] if takes_types else [])
    args = [ids, mask] + ([torch.zeros_like(ids)] if takes_types else [])
    axes: dict[str, dict[int, str]] = {n: {0: "batch", 1: "sequence"} for n in names}
    if is_query:
        names.append("is_query")
        args.append(torch.ones(1, dtype=torch.int64))
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("ignore")  # the tracer's notes on Python control flow
        torch.onnx.export(module, tuple(args), str(path), input_names=names,
                          output_names=list(outputs), dynamic_axes={**axes, **outputs},
                          opset_version=OPSET, dynamo=False)  # fmt: skip
    return names


def _fuse(config: Any, src: Path, dst: Path) -> None:
    """ORT's transformer optimiser: fused Attention, SkipLayerNorm, BiasGelu kernels.

    Its EmbedLayerNormalization fusion is left off: that op turns the attention mask into
    per-row lengths, which is only right for right padding (left-padded rows came out wrong
    by ~3.0 max abs). Attention keeps the raw 2-D mask instead, which is right for any padding.
    """
    from onnxruntime.transformers.fusion_options import AttentionMaskFormat, FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions("bert")
    options.enable_embed_layer_norm = False
    options.attention_mask_format = AttentionMaskFormat.AttentionMask
    fused = optimize_model(
        str(src),
        model_type="bert",
        num_heads=int(getattr(config, "num_attention_heads", 0)),
        hidden_size=int(getattr(config, "hidden_size", 0)),
        opt_level=0,
        optimization_options=options,
    )
    if not fused.get_fused_operator_statistics().get("Attention"):
        raise ExportError(expected="a fused attention block", got="none was fused")
    fused.save_model_to_file(str(dst))


def quantize_int8(src: Path, dst: Path) -> Path:
    """Dynamic int8 (per-channel weights) of the ONNX graph ``src``, written to ``dst``."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    onnx = _import_onnx()
    # Fused contrib ops have no ONNX shape inference; float is the type of every tensor here.
    extra = {"DefaultTensorType": onnx.TensorProto.FLOAT}
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # the quantiser logs advice on the root logger; not for users
    try:
        quantize_dynamic(
            str(src), str(dst), weight_type=QuantType.QInt8, per_channel=True, extra_options=extra
        )
    finally:
        root.setLevel(level)
    # One scale per token instead of per batch: a text's int8 vector no longer depends on
    # the other texts of its batch (see poolkit.backends.rowquant).
    try:
        onnx.save(quantize_rows(onnx.load(str(dst))), str(dst))
    except ValueError as e:  # a quantised graph of a shape the rewrite does not know
        raise ExportError(where=f"int8 quantisation of {src.name}", expected="a quantised graph",
                          got=f"it failed ({e}); nothing was cached", fix="Run without "
                          "quantize='int8' (the fp32 ONNX backend) for this model.") from None  # fmt: skip
    return dst


def _padded_batch(
    batch: int, length: int, side: str, vocab: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    # ids past the special tokens; a tiny vocabulary (tests) starts lower
    ids = rng.integers(
        min(1000, vocab // 2), min(vocab, 20000), size=(batch, length), dtype=np.int64
    )
    lengths = (
        np.linspace(length, max(1, length // 4), batch).astype(int)
        if batch > 1
        else np.array([length])
    )
    pos = np.arange(length)
    mask = (
        (pos[None, :] < lengths[:, None])
        if side == "right"
        else (pos[None, :] >= length - lengths[:, None])
    )
    ids = np.where(mask, ids, 0)
    return ids, mask.astype(np.int64)


def check_batches(vocab: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The padded ``(input_ids, attention_mask)`` batches an export is checked on before use."""
    for i, (b, length, side) in enumerate(CHECK_SHAPES):
        yield _padded_batch(b, length, side, vocab, seed=100 + i)


def check_against_torch(
    model: Any, runner: Any, what: str, min_cos: float | None = None,
    batches: Iterable[tuple[np.ndarray, np.ndarray]] | None = None,
) -> dict[str, float]:  # fmt: skip
    """``{"max_abs_diff", "mean_token_cosine"}`` of ``runner(ids, mask)`` against the torch
    ``model``'s last layer over the real positions of ``batches`` (default: the
    :func:`check_batches`); ExportError naming ``what`` unless the first is within
    :data:`FP32_TOL` (``min_cos`` None) or the second at least ``min_cos``."""
    import torch

    worst_abs, cosines = 0.0, []
    for ids, mask in batches or check_batches(model.config.vocab_size):
        with torch.inference_mode():
            ref = model(
                input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)
            ).last_hidden_state.numpy()
        out = runner(ids, mask)
        real = mask.astype(bool)
        worst_abs = max(worst_abs, float(np.abs(out[real] - ref[real]).max()))
        a, b = out[real], ref[real]
        cosines.append((a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)))
    mean_cos = float(np.concatenate(cosines).mean())
    if min_cos is None:
        ok, limit = worst_abs <= FP32_TOL, f"max abs diff <= {FP32_TOL}"
    else:
        ok, limit = mean_cos >= min_cos, f"mean token cosine >= {min_cos}"
    if not ok:
        raise ExportError(expected=f"{what} to agree with the torch model on padded batches "
                          f"({limit})", got=f"got max abs diff {worst_abs:.3g}, mean token "
                          f"cosine {mean_cos:.5f}; nothing was cached",
                          fix="Use backend='torch' for this model.")  # fmt: skip
    return {"max_abs_diff": worst_abs, "mean_token_cosine": mean_cos}


def _check(model: Any, path: Path, settings: dict[str, Any]) -> dict[str, Any]:
    min_cos = None if settings["quantize"] is None else INT8_MIN_COS
    result = check_against_torch(model, OnnxRunner(path, settings=settings), "the ONNX export",
                                 min_cos)  # fmt: skip
    return {**result, "shapes": [list(s) for s in CHECK_SHAPES]}


class ExportedBackend:
    """:class:`poolkit.backends.Backend` over a :class:`Runner`: ``forward`` takes the
    Encoder's ``(B, L)`` int64 arrays and returns ``last_hidden_state`` ``(B, L, H)`` as
    float32 NumPy; pooling then runs in the core functions as for torch. Only the last layer
    is exported and position ids are no input of the graph, so ``all_layers=True`` and
    left-padded decoder batches are refused."""

    device = "cpu"
    name = ""  # the backend's name in messages
    runner: Runner

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.runner!r})"

    def forward(self, inputs: Any, *, all_layers: bool = False) -> np.ndarray:
        if all_layers:
            value_error(
                "layers",
                f"None (the last layer) with backend={self.name!r}",
                "a request for all layers",
                "Use backend='torch' to mix layers.",
            )
        if "position_ids" in inputs:
            value_error(
                "backend",
                "'torch' for a left-padded decoder model",
                repr(self.name),
                "The exported graph takes no position ids; use backend='torch'.",
            )
        return self.runner(
            inputs["input_ids"], inputs["attention_mask"], inputs.get("token_type_ids")
        )


class OnnxBackend(ExportedBackend):
    """The backend ``Encoder(backend="onnx")`` uses: ONNX Runtime on the CPU."""

    name = "onnx"

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        quantize: str | None = None,
        threads: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.runner = load_onnx_runner(
            model_dir, quantize=quantize, threads=threads, cache_dir=cache_dir
        )
