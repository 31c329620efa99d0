"""--backend, --quantize and --calibrate (declared with the output stage's --ranges):
checked once for every engine, each refusal one line before any model is loaded."""

from __future__ import annotations

import argparse

from poolkit.backends import QUANTIZED_BY
from poolkit.cli._common import require_extra
from poolkit.errors import InputError

__all__ = ["add_backend_arguments", "calibration_texts", "check_backend_args"]


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=["torch", "onnx", "openvino"], default="torch",
                        help="runtime: torch; onnx (ONNX Runtime, CPU); openvino (that ONNX "
                        "export run by OpenVINO, CPU; --dtype bfloat16 for bf16); exported "
                        "once and cached (default: torch)")  # fmt: skip
    parser.add_argument("--quantize", choices=["int8", "int8-static"], default=None,
                        help="int8: dynamic int8 (--backend onnx); int8-static: static int8 "
                        "calibrated on --calibrate FILE, else on the first 300 input texts "
                        "(--backend openvino) (default: none, float32)")  # fmt: skip


def check_backend_args(args: argparse.Namespace, *, output_ranges: bool = False) -> None:
    """Refuse flag combinations no backend would honour; MissingDependencyError for a
    missing extra. ``output_ranges``: the vectors are stored as int8/uint8, whose ranges
    ``--calibrate`` may calibrate too (``poolkit embed``)."""
    backend, quantize = args.backend, args.quantize
    if quantize is not None and QUANTIZED_BY[quantize] != backend:
        raise InputError(arg="--backend", expected=f"{QUANTIZED_BY[quantize]} with --quantize "
                         f"{quantize}", got=backend,
                         fix=f"Add --backend {QUANTIZED_BY[quantize]}.")  # fmt: skip
    if getattr(args, "calibrate", None) is not None and quantize != "int8-static":
        if not output_ranges:
            raise InputError(arg="--calibrate", expected="given only with --backend openvino "
                             "--quantize int8-static or --precision int8/uint8 (the other "
                             "modes need no calibration)", got=args.calibrate,
                             fix="Drop --calibrate.")  # fmt: skip
    dtype = getattr(args, "dtype", None)
    if backend == "onnx" and dtype not in (None, "float32"):
        raise InputError(arg="--dtype", expected="float32 on the onnx backend (or --quantize "
                         "int8)", got=dtype, fix="Drop --dtype, or use --backend openvino "
                         "--dtype bfloat16.")  # fmt: skip
    if backend == "openvino" and dtype not in (None, "float32", "bfloat16"):
        raise InputError(arg="--dtype", expected="float32 or bfloat16 on the openvino backend "
                         "(CPU)", got=dtype)  # fmt: skip
    device = getattr(args, "device", "auto")
    if backend in ("onnx", "openvino") and device not in ("auto", "cpu"):
        raise InputError(arg="--device", expected=f"cpu on the {backend} backend", got=device,
                         fix="Drop --device.")  # fmt: skip
    if backend in ("onnx", "openvino"):
        require_extra(f"--backend {backend}", "onnxruntime", "onnxruntime", backend)
    if backend == "openvino":
        require_extra("--backend openvino", "openvino", "openvino", "openvino")
    if quantize == "int8-static":
        require_extra("--quantize int8-static", "nncf", "nncf", "openvino")


def calibration_texts(args: argparse.Namespace, first: list[str] | None) -> list[str] | None:
    """The texts ``--quantize int8-static`` calibrates on: ``--calibrate FILE`` (read with
    poolkit's reader), else the non-blank texts of ``first`` (the input's first part);
    None for other modes. At most ``CALIBRATION_TEXTS`` are kept."""
    from poolkit.encoder import CALIBRATION_TEXTS

    if args.quantize != "int8-static":
        return None
    if args.calibrate is not None:
        from poolkit.io.readers import input_format, read_texts

        # A .txt has no columns: --text-column names INPUT's column, not this file's.
        column = None if input_format(args.calibrate, None) == "txt" else args.text_column
        head = next(read_texts(args.calibrate, text_column=column,
                               chunk_size=CALIBRATION_TEXTS))  # fmt: skip
        texts = [t for t in head if t.strip()]
        source = f"--calibrate {args.calibrate}"
    else:
        texts = [t for t in (first or []) if t.strip()][:CALIBRATION_TEXTS]
        source = "the input"
    if not texts:
        raise InputError(where="--quantize int8-static", expected="a non-blank text to "
                         "calibrate on", got=f"{source} has none",
                         fix="Pass --calibrate FILE with some of your texts.")  # fmt: skip
    return texts
