"""OpenVINO backend: the cached ONNX export, converted once to OpenVINO IR, run on the CPU.

Three precisions of the same graph, each its own cache entry under ``<cache>/openvino/<key>/``:

- ``f32``: ``INFERENCE_PRECISION_HINT=f32`` set explicitly. OpenVINO's CPU plugin otherwise
  runs bf16 wherever the CPU has AVX512_BF16/AMX, which would change results silently.
- ``bf16`` (``dtype="bfloat16"``): bf16 inference on CPUs that have it; refused elsewhere.
- ``int8-static``: post-training static int8 with NNCF (``model_type=TRANSFORMER``,
  SmoothQuant alpha :data:`SMOOTH_QUANT_ALPHA`), calibrated on the user's texts
  (``calibrate=``). Activation scales are fixed at calibration, so a text's vector does not
  depend on the other texts of its batch.

The key hashes the source ONNX export's settings (model weights, library versions), the
OpenVINO/NNCF versions, the precision and, for int8, a digest of the tokenized calibration
texts and the calibration settings. As for ONNX (:mod:`poolkit.backends.onnx`, whose cache,
integrity check and torch comparison this module reuses), an entry is published only after
its compiled model has been checked against the torch model on padded batches, left and
right, and every file is hashed on load.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from poolkit._errors import value_error
from poolkit.backends import onnx as _onnx
from poolkit.errors import RunError

__all__ = [
    "PRECISIONS", "SMOOTH_QUANT_ALPHA", "OpenVinoBackend", "OpenVinoRunner", "load_openvino_runner",
]  # fmt: skip

_FORMAT = 2  # bump when the conversion or calibration recipe changes (2: SmoothQuant alpha)
# Checked against torch on onnx.check_batches (random ids, padded both sides): max abs diff
# for f32 (ONNX's tolerance); mean per-token cosine for the approximate precisions.
# Measured on all-MiniLM-L6-v2: f32 6e-6, bf16 0.99997, int8-static 0.998 (bench_speed's 300
# calibration texts in the check's batches).
_BF16_MIN_COS = 0.999
# Symmetric weights, asymmetric activations (NNCF's transformer default).
_CALIBRATION_PRESET = "mixed"
# SmoothQuant's alpha for matmuls: how much of the activations' outliers moves into the
# weights. NNCF's transformer default, 0.95, left some texts far from fp32 (all-MiniLM-L6-v2,
# 300 mixed STS-B train texts, held-out train texts: cosine min 0.847, mean 0.9885 on 2000
# sentences); 0.7 gave min 0.965, mean 0.9973 (long texts: 0.994 / 0.9970, from 0.966 /
# 0.9887). `python bench/bench_calibration.py` reruns that comparison.
SMOOTH_QUANT_ALPHA = 0.7
PRECISIONS = ("f32", "bf16", "int8-static", "int8-static+bf16")


def _import_ov() -> Any:
    return _onnx.require("openvino", "The OpenVINO backend", "openvino")


def _import_nncf() -> Any:
    return _onnx.require("nncf", "quantize='int8-static' (NNCF calibration)", "openvino")


def cpu_has_bf16() -> bool:
    """Whether OpenVINO's CPU plugin can run bf16 here (AVX512_BF16 or AMX)."""
    ov = _import_ov()
    caps = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    return "BF16" in caps


def precision_of(dtype: Any, quantize: str | None) -> str:
    """The precision name for ``dtype`` (None/float32/bfloat16, strings or torch dtypes) and
    ``quantize`` (None or ``"int8-static"``); ValueError naming the argument otherwise."""
    name = str(dtype).removeprefix("torch.") if dtype is not None else "float32"
    name = {"fp32": "float32", "bf16": "bfloat16"}.get(name, name)
    if name not in ("float32", "bfloat16"):
        value_error("dtype", "None, 'float32' or 'bfloat16' with backend='openvino'",
                     repr(dtype), "OpenVINO runs on the CPU, which has no float16 path here.")  # fmt: skip
    bf16 = name == "bfloat16"
    if quantize == "int8-static":
        return "int8-static+bf16" if bf16 else "int8-static"
    return "bf16" if bf16 else "f32"


class OpenVinoRunner(_onnx.Runner):
    """A compiled OpenVINO model: token ids in, ``last_hidden_state`` ``(B, L, H)`` float32 out.

    Called as :class:`poolkit.backends.onnx.Runner`. One synchronous request per batch:
    ``PERFORMANCE_HINT=LATENCY`` (one stream using every thread; THROUGHPUT's several
    streams only pay off with several requests in flight), ``INFERENCE_NUM_THREADS=threads``,
    and the precision hint of ``settings["precision"]``.
    """

    shown = "precision"

    def __init__(
        self, path: str | os.PathLike[str], *, threads: int | None = None,
        settings: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        ov = _import_ov()
        super().__init__(path, threads, settings)
        precision = self.settings.get("precision", "f32")
        config = {
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_NUM_THREADS": self.threads,
            "INFERENCE_PRECISION_HINT": "bf16" if precision.endswith("bf16") else "f32",
        }
        core = ov.Core()
        self.compiled = core.compile_model(core.read_model(str(self.path)), "CPU", config)
        self.request = self.compiled.create_infer_request()
        self.input_names = tuple(i.get_any_name() for i in self.compiled.inputs)

    def _infer(self, feed: dict[str, np.ndarray]) -> Any:
        # A copy: the request reuses its output buffer on the next call.
        return np.array(self.request.infer(feed)[self.compiled.output(0)], dtype=np.float32)


def calibration_digest(batches: Sequence[Mapping[str, np.ndarray]]) -> str:
    """SHA-256 of the tokenized calibration inputs (ids and mask of every item, in order)."""
    h = hashlib.sha256()
    for item in batches:
        for name in ("input_ids", "attention_mask"):
            arr = np.ascontiguousarray(item[name], dtype=np.int64)
            h.update(name.encode() + str(arr.shape).encode() + arr.tobytes())
    return h.hexdigest()


def _settings(
    hf_dir: Path, precision: str, calibration: Sequence[Mapping[str, np.ndarray]] | None
) -> dict[str, Any]:
    from importlib.metadata import version

    source = _onnx.cache_settings(hf_dir)  # the plain fp32 export it converts
    settings: dict[str, Any] = {
        "format": _FORMAT,
        "precision": precision,
        "source": {k: v for k, v in source.items() if k not in ("hidden_size",
                                                                "max_position_embeddings")},
        "hidden_size": source["hidden_size"],
        "max_position_embeddings": source["max_position_embeddings"],
        "versions": {"openvino": version("openvino")},
    }  # fmt: skip
    if precision.startswith("int8-static"):
        settings["versions"]["nncf"] = version("nncf")
        settings["calibration"] = {
            "texts": len(calibration or ()),
            "digest": calibration_digest(calibration or ()),
            "preset": _CALIBRATION_PRESET,
            "model_type": "transformer",
            "smooth_quant_alpha": SMOOTH_QUANT_ALPHA,
        }
    return settings


def load_openvino_runner(
    model_dir: str | os.PathLike[str],
    *,
    precision: str = "f32",
    calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    threads: int | None = None,
) -> OpenVinoRunner:
    """Build (first call) or load (later calls) the OpenVINO model of a local model folder.

    ``precision``: one of :data:`PRECISIONS`. ``calibration``: for the int8 precisions, the
    tokenized calibration texts, one ``{"input_ids", "attention_mask"[, "token_type_ids"]}``
    dict of ``(1, L)`` arrays per text (``Encoder(calibrate=...)`` makes them); each is one
    NNCF calibration sample. Raises ``ValueError`` for a bad precision or calibration,
    :class:`ExportError` when the model disagrees with torch (nothing is cached then).
    """
    _import_ov()
    _onnx.require_onnx()
    if precision not in PRECISIONS:
        value_error("precision", f"one of {', '.join(PRECISIONS)}", repr(precision))
    quantized = precision.startswith("int8-static")
    if quantized and not calibration:
        value_error("calibrate", "a non-empty list of texts with quantize='int8-static'",
                     repr(calibration), "Pass some of your texts (100-300 is plenty).")  # fmt: skip
    if not quantized and calibration:
        value_error("calibrate", "None without quantize='int8-static'", "calibration texts",
                     "Drop calibrate=, or add quantize='int8-static'.")  # fmt: skip
    if precision.endswith("bf16") and not cpu_has_bf16():
        value_error("dtype", "'float32' on this CPU", "'bfloat16'",
                     "Its CPU has neither AVX512_BF16 nor AMX, so OpenVINO cannot run bf16 here.")  # fmt: skip
    hf_dir = _onnx.transformer_dir(model_dir)
    settings = _settings(hf_dir, precision, calibration)
    entry = _onnx.onnx_cache_root(cache_dir, "openvino") / _onnx.entry_key(settings)
    record = _onnx.cached_record(entry, "model.xml", lambda work: _build(hf_dir, settings, work,
                                 cache_dir, calibration), RunError, "OpenVINO model")  # fmt: skip
    return OpenVinoRunner(entry / "model.xml", threads=threads, settings=record)


def _build(
    hf_dir: Path,
    settings: dict[str, Any],
    work: Path,
    cache_dir: str | os.PathLike[str] | None,
    calibration: Sequence[Mapping[str, np.ndarray]] | None,
) -> dict[str, Any]:
    ov = _import_ov()
    source = _onnx.load_onnx_runner(hf_dir, quantize=None, cache_dir=cache_dir).path
    model = ov.convert_model(str(source))
    if settings["precision"].startswith("int8-static"):
        model = _calibrate(model, calibration or ())
    # Weights kept in float32: the precision is chosen at compile time.
    ov.save_model(model, str(work / "model.xml"), compress_to_fp16=False)
    return {**settings, "check": _check(hf_dir, work / "model.xml", settings, calibration)}


def _calibrate(
    model: Any, calibration: Sequence[Mapping[str, np.ndarray]],
    alpha: float = SMOOTH_QUANT_ALPHA,
) -> Any:  # fmt: skip
    """NNCF static int8 of the OpenVINO ``model``, its activation ranges measured on
    ``calibration`` (one sample per text, so padding never enters the statistics);
    ``alpha``: SmoothQuant's for matmuls (another value serves bench/bench_calibration.py)."""
    nncf = _import_nncf()
    names = {i.get_any_name() for i in model.inputs}
    items = [{k: np.asarray(v, dtype=np.int64) for k, v in item.items() if k in names}
             for item in calibration]  # fmt: skip
    for item in items:  # a graph input the tokenizer does not give: zeros, as at inference
        if "token_type_ids" in names and "token_type_ids" not in item:
            item["token_type_ids"] = np.zeros_like(item["input_ids"])
    nncf.set_log_level(logging.ERROR)
    # NNCF draws rich progress bars on stdout/stderr: not for users (stdout may be the output).
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        return nncf.quantize(
            model,
            nncf.Dataset(items),
            preset=nncf.QuantizationPreset.MIXED,
            model_type=nncf.ModelType.TRANSFORMER,
            subset_size=len(items),
            advanced_parameters=nncf.AdvancedQuantizationParameters(
                smooth_quant_alphas=nncf.AdvancedSmoothQuantParameters(matmul=alpha)
            ),
        )


def text_batches(
    calibration: Sequence[Mapping[str, np.ndarray]], pad_id: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The calibration texts as padded ``(input_ids, attention_mask)`` batches of the check's
    sizes and padding sides (:data:`poolkit.backends.onnx.CHECK_SHAPES`), as far as they go."""
    rows = [
        (np.asarray(c["input_ids"])[0], np.asarray(c["attention_mask"])[0]) for c in calibration
    ]
    out, start = [], 0
    for size, _, side in _onnx.CHECK_SHAPES:
        chunk = rows[start : start + size]
        if not chunk:
            break
        start += size
        width = max(len(ids) for ids, _ in chunk)
        ids = np.full((len(chunk), width), pad_id, dtype=np.int64)
        mask = np.zeros((len(chunk), width), dtype=np.int64)
        for j, (row, m) in enumerate(chunk):
            at = slice(0, len(row)) if side == "right" else slice(width - len(row), width)
            ids[j, at], mask[j, at] = row, m
        out.append((ids, mask))
    return out


def _check(
    hf_dir: Path, path: Path, settings: dict[str, Any],
    calibration: Sequence[Mapping[str, np.ndarray]] | None,
) -> dict[str, Any]:  # fmt: skip
    """Compare with torch on padded batches. Static int8 is judged on real text (the
    calibration texts, padded left and right): its activation ranges are fixed for text
    like that, and random token ids (what fp32 and bf16 are checked on) fall outside them
    (mean token cosine 0.93 on random ids vs 0.98+ on text, MiniLM, 40 STS-B texts)."""
    precision = settings["precision"]
    runner = OpenVinoRunner(path, settings=settings)
    batches = text_batches(calibration) if calibration else None
    min_cos = {"f32": None, "bf16": _BF16_MIN_COS}.get(precision, _onnx.INT8_MIN_COS)
    result = _onnx.check_against_torch(_onnx.load_torch(hf_dir), runner,
                                       f"the OpenVINO model ({precision})", min_cos, batches)  # fmt: skip
    shapes = ([[int(i.shape[0]), int(i.shape[1]), side] for (i, _), (_, _, side)
               in zip(batches, _onnx.CHECK_SHAPES, strict=False)] if batches
              else [list(s) for s in _onnx.CHECK_SHAPES])  # fmt: skip
    return {**result, "shapes": shapes,
            "on": "calibration texts" if batches else "random token ids"}  # fmt: skip


class OpenVinoBackend(_onnx.ExportedBackend):
    """The backend ``Encoder(backend="openvino")`` uses: OpenVINO on the CPU."""

    name = "openvino"

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        precision: str = "f32",
        calibration: Sequence[Mapping[str, np.ndarray]] | None = None,
        threads: int | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.runner = load_openvino_runner(model_dir, precision=precision, calibration=calibration,
                                           threads=threads, cache_dir=cache_dir)  # fmt: skip
