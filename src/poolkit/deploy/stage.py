"""A recipe's output stage as ONNX nodes: the ``/TRANSFORM/DIMS/PRECISION`` of
:func:`poolkit.plan.stage_floats` and ``poolkit.output`` appended to an exported graph, so
that the graph returns the stored form.

After the pooled (and, where the recipe normalises, L2-normalised) ``(batch, D)`` vectors:
a fitted transform ``(x - mean) @ matrix`` (:class:`poolkit.fitted.Fit`, as ``Sub`` and
``MatMul``; L2-normalised again where the recipe normalises), then keep the first ``dims``
columns, L2-normalise them again where the recipe normalises, then store them at the
precision: float16 a cast; int8/uint8 ``floor((v - start) / step)`` clipped to 0..255
(minus 128 for int8) with the calibration's starts and steps as constants; binary/ubinary
the sign bits packed 8 per byte, first dimension in the high bit (minus 128 for binary).
Each step is the float32 arithmetic :func:`poolkit.output.truncate` and
:func:`poolkit.output.quantize` do, in the same order, so the bytes are theirs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from poolkit._errors import value_error
from poolkit.fitted import Fit
from poolkit.output import Calibration, needs_calibration, stored_dtype, stored_width
from poolkit.recipe import Recipe

__all__ = ["append_output_stage", "check_stage_export", "stage_ranges"]

_EPS = 1e-12  # poolkit.output.l2_normalize's floor on a row's norm


def check_stage_export(recipe: Recipe, format: str, calibration: Any) -> None:
    """Refuse, before anything loads, an output stage ``format`` cannot hold: a precision
    in a sentence-transformers folder (it returns float vectors), int8/uint8 without
    ranges, ranges for a recipe that takes none."""
    name = str(recipe)
    if recipe.precision is not None and format == "sentence-transformers":
        value_error("recipe", "a recipe without /PRECISION for the sentence-transformers format",
                    f"{name!r}", "A SentenceTransformer returns float vectors; use "
                    "`format='onnx'`, whose graph returns the stored form.")  # fmt: skip
    if needs_calibration(recipe.precision) and calibration is None:
        value_error("calibration", f"the ranges of the {recipe.precision} recipe {name!r}",
                    "none", "Pass `calibration` (texts like the corpus', or the ranges an "
                    "earlier embed recorded); the graph holds them as constants.")  # fmt: skip
    if calibration is not None and not needs_calibration(recipe.precision):
        value_error("calibration", "None for a recipe without int8/uint8", f"ranges for {name!r}",
                    "Drop `calibration`, or export an int8 or uint8 recipe.")  # fmt: skip


def stage_ranges(
    encoder: Any, recipe: Recipe, calibration: Any, fits: dict[str, Fit] | None = None
) -> Calibration | None:
    """``recipe``'s ``dims`` checked against the model's width, and its int8/uint8 ranges
    from ``calibration`` (as :func:`poolkit.embed` takes it; None without int8/uint8), of
    the vectors its fit (in ``fits``, by recipe) transformed."""
    from poolkit.embedding import calibrate_recipes
    from poolkit.plan import make_plan

    if not recipe.has_output_stage:
        return None
    one = {str(recipe): recipe}
    fits = fits if recipe.transform is not None else None
    make_plan(encoder, one, prompt="", fits=fits)  # dims fit, before calibrating
    if calibration is None:
        return None
    ranges = calibrate_recipes(encoder, one, calibration, fits=fits)
    return make_plan(encoder, one, prompt="", calibration=ranges, fits=fits).ranges[str(recipe)]


def append_output_stage(
    path: Path,
    output: str,
    width: int,
    dims: int | None,
    normalize: bool,
    precision: str | None,
    calibration: Calibration | None,
    fit: Fit | None = None,
) -> dict[str, Any]:
    """Rewrite the graph at ``path`` so ``output`` (float ``(batch, width)``) becomes the
    stored form of ``(batch, dims)`` vectors at ``precision``; returns its dtype and width
    (and, with ``fit``, its transform).

    ``calibration``: the int8/uint8 ranges (``dims`` of them; required for those);
    ``fit``: the recipe's fitted transform (``width`` inputs), applied first.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(path))
    graph = model.graph
    pooled = output + "_pooled"
    for node in graph.node:
        node.output[:] = [pooled if o == output else o for o in node.output]
    (old,) = [o for o in graph.output if o.name == output]
    batch = old.type.tensor_type.shape.dim[0].dim_param or "batch"
    graph.output.remove(old)

    nodes: list[Any] = []
    consts: list[Any] = []

    def const(name: str, value: Any) -> str:
        consts.append(numpy_helper.from_array(np.asarray(value), f"{output}_{name}"))
        return f"{output}_{name}"

    def op(kind: str, inputs: list[str], name: str, **attrs: Any) -> str:
        out = f"{output}_{name}"
        nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    def l2(x: str, at: str) -> str:  # as l2_normalize: x / max(||x||, 1e-12)
        sq = op("Mul", [x, x], f"{at}squares")
        total = op("ReduceSum", [sq, const(f"{at}axis", np.array([1], np.int64))], f"{at}sum",
                   keepdims=1)  # fmt: skip
        norm = op("Max", [op("Sqrt", [total], f"{at}norm"),
                          const(f"{at}eps", np.float32(_EPS))], f"{at}norm_floor")  # fmt: skip
        return op("Div", [x, norm], f"{at}renormalised")

    x = pooled
    if fit is not None:
        assert fit.in_dim == width  # checked by the caller (Fit.check)
        # As Fit.apply: centred first, then one product (not x @ W - mean @ W, whose two
        # large terms would cancel), so the graph rounds as poolkit.embed does.
        x = op("Sub", [x, const("fit_mean", np.asarray(fit.mean, np.float32))], "fit_centred")
        x = op("MatMul", [x, const("fit_matrix", np.asarray(fit.matrix, np.float32))],
               "fit_transformed")  # fmt: skip
        if normalize:
            x = l2(x, "fit_")
        width = fit.out_dim
    k = width if dims is None else dims
    if k != width:
        x = op("Slice", [x, const("begin", np.array([0], np.int64)),
                         const("end", np.array([k], np.int64)),
                         const("axes", np.array([1], np.int64))], "truncated")  # fmt: skip
        if normalize:
            x = l2(x, "")
    p = precision or "float32"
    elem = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
            "int8": TensorProto.INT8, "uint8": TensorProto.UINT8,
            "binary": TensorProto.INT8, "ubinary": TensorProto.UINT8}[p]  # fmt: skip
    if p == "float16":
        x = op("Cast", [x], "half", to=elem)
    elif p in ("int8", "uint8"):
        assert calibration is not None and calibration.dims == k  # checked by the caller
        starts = np.asarray(calibration.starts, np.float32)
        steps = np.asarray(calibration.steps, np.float32)
        steps = np.where(steps > 0, steps, np.float32(1))  # as quantize: unit buckets
        x = op("Sub", [x, const("starts", starts)], "offset")
        x = op("Floor", [op("Div", [x, const("steps", steps)], "buckets")], "floor")
        x = op("Clip", [x, const("lo", np.float32(0)), const("hi", np.float32(255))], "codes")
    elif p in ("binary", "ubinary"):
        # Bit j of a row goes to byte j // 8 with weight 2 ** (7 - j % 8): one matrix
        # product of 0/1 values by powers of two (exact in float32, at most 255).
        weights = np.zeros((k, stored_width(k, p)), np.float32)
        j = np.arange(k)
        weights[j, j // 8] = 2.0 ** (7 - j % 8)
        bits = op("Cast", [op("Greater", [x, const("zero", np.float32(0))], "signs")], "bits",
                  to=TensorProto.FLOAT)  # fmt: skip
        x = op("MatMul", [bits, const("weights", weights)], "bytes")
    if p in ("int8", "binary"):  # the signed forms: codes 0..255 less 128
        x = op("Sub", [x, const("shift", np.float32(128))], "shifted")
    if p in ("int8", "uint8", "binary", "ubinary"):
        x = op("Cast", [x], "stored", to=elem)
    nodes.append(helper.make_node("Identity", [x], [output], name=f"{output}_out"))
    graph.node.extend(nodes)
    graph.initializer.extend(consts)
    graph.output.append(
        helper.make_tensor_value_info(output, elem, [batch, stored_width(k, precision)])
    )
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    stage = {"dtype": stored_dtype(precision).name, "width": stored_width(k, precision), "dims": k}
    if fit is not None:
        stage["transform"] = fit.transform
    return stage
