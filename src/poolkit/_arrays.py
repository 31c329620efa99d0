"""Array helpers shared by the NumPy and PyTorch paths.

Every pooling rule is written once against the array-API namespace ``xp`` of its input
(``array_api_compat``), so NumPy users never import torch. Index planning (masks, spans,
word ids: small integer arrays) happens on the host in NumPy; only the reductions over
hidden states run in the input's own namespace and on its device.
"""

from __future__ import annotations

from typing import Any

import array_api_compat
import numpy as np

from poolkit._errors import type_error, value_error

Array = Any  # a NumPy array or a torch tensor


def namespace(x: Array, arg: str = "hidden") -> Any:
    """The array-API namespace of ``x``; TypeError naming ``arg`` for anything else."""
    if array_api_compat.is_numpy_array(x) or array_api_compat.is_torch_array(x):
        return array_api_compat.array_namespace(x)
    type_error(
        arg,
        "a NumPy array or a torch tensor",
        type(x).__name__,
        "Convert it with numpy.asarray(...) or torch.as_tensor(...).",
    )


def dtype_name(x: Array) -> str:
    return str(x.dtype).removeprefix("torch.")


def float_hidden(x: Array, arg: str = "hidden") -> tuple[Any, Any]:
    """Check that ``x`` holds floating point values; return ``(xp, output_dtype)``.

    The output dtype is float32 for float16, bfloat16 and float32 inputs, float64 for
    float64: half-precision inputs are reduced in float32 so sums never overflow.
    """
    xp = namespace(x, arg)
    if not xp.isdtype(x.dtype, "real floating"):
        not_float(x, arg)
    out = xp.float64 if x.dtype == xp.float64 else xp.float32
    return xp, out


def not_float(x: Array, arg: str = "hidden") -> Any:
    """The TypeError of a ``hidden`` that does not hold floating point values."""
    type_error(
        arg,
        "a floating point array (float16, bfloat16, float32 or float64)",
        f"dtype {dtype_name(x)}",
        "Cast it first, e.g. hidden.astype('float32') or hidden.float().",
    )


def batch_view(hidden: Array, arg: str = "hidden") -> Array:
    """``hidden`` ``(L, H)`` or ``(B, L, H)`` as a ``(B, L, H)`` view (``B = 1`` for one
    text); ValueError naming ``arg`` for any other shape."""
    if hidden.ndim not in (2, 3):
        value_error(arg, "of shape (L, H) or (B, L, H)", f"shape {tuple(hidden.shape)}")
    return hidden if hidden.ndim == 3 else hidden[None, ...]


def device_of(x: Array) -> Any:
    return array_api_compat.device(x)


def to_host(x: Any, arg: str) -> np.ndarray:
    """A NumPy copy of a small index-like input (mask, spans, word ids) for planning."""
    if array_api_compat.is_torch_array(x):
        return x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return x
    try:
        return np.asarray(x)
    except (TypeError, ValueError) as err:
        type_error(
            arg, "an array, a tensor or a nested list of integers", type(x).__name__, str(err)
        )


def host_mask(mask: Any, shape: tuple[int, ...], arg: str = "mask") -> np.ndarray:
    """Validate a 0/1 mask of ``shape`` and return it as a NumPy bool array."""
    m = to_host(mask, arg)
    if m.dtype != np.bool_:
        if not np.issubdtype(m.dtype, np.integer):
            type_error(
                arg,
                "a bool or integer 0/1 array",
                f"dtype {m.dtype}",
                "Pass the tokenizer's mask as it is (int64) or as bool.",
            )
        bad = (m != 0) & (m != 1)
        if bad.any():
            value_error(
                arg,
                "0/1 values",
                f"value {m[bad].flat[0]} at index {tuple(int(i) for i in np.argwhere(bad)[0])}",
                "Use 1 for real tokens and 0 for padding.",
            )
        m = m.astype(bool)
    if m.shape != shape:
        value_error(
            arg,
            f"of shape {shape} (the leading dimensions of `hidden`)",
            f"shape {m.shape}",
        )
    return m


def to_device(xp: Any, values: np.ndarray, like: Array) -> Array:
    """Move a host NumPy array to the namespace and device of ``like``."""
    if array_api_compat.is_numpy_array(like):
        return values
    return xp.asarray(values, device=device_of(like))


def check_finite(xp: Any, out: Array, arg: str = "hidden") -> None:
    """Raise when a result holds NaN or inf: the input had them in real positions."""
    if bool(xp.all(xp.isfinite(out))):
        return
    bad = ~xp.isfinite(out)
    while bad.ndim > 1:
        bad = xp.any(bad, axis=-1)
    rows = np.flatnonzero(to_host(bad, arg)).tolist() if bad.ndim else [0]
    value_error(
        arg,
        "finite in its real (unmasked) positions",
        f"NaN or inf reaching the result in row(s) {rows[:8]}",
        "Check the encoder's output (fp16 overflow is a common cause) or mask those tokens.",
    )


def cpu_fast_path(x: Array, *others: Array | None) -> tuple[list[Array | None], Any]:
    """Zero-copy NumPy views of CPU torch tensors that need no gradient.

    The rules are written once against ``xp``; this only picks NumPy as the ``xp`` for
    CPU tensors. Per-row reductions are small operations, and torch opens an OpenMP
    parallel region for each one: on a busy machine every region waits for a core, which
    made a 128-row mean 100x slower than the same NumPy call. Returns the arrays to
    compute on and a function that turns a NumPy result back into a tensor.
    Tensors that require grad, live on an accelerator or are bfloat16 stay in torch.
    """
    arrays = [x, *others]
    torch_inputs = [a for a in arrays if a is not None and array_api_compat.is_torch_array(a)]
    if not torch_inputs:
        return arrays, _identity
    import torch

    usable = all(
        a.device.type == "cpu" and not a.requires_grad and a.dtype != torch.bfloat16
        for a in torch_inputs
    )
    if not usable or not array_api_compat.is_torch_array(x):
        return arrays, _identity
    views = [
        a.detach().numpy() if a is not None and array_api_compat.is_torch_array(a) else a
        for a in arrays
    ]
    return views, torch.from_numpy


def _identity(x: Array) -> Array:
    return x


def dense_path(x: Array, *others: Array | None) -> bool:
    """True when ``x`` takes the vectorised torch path instead of the per-row one.

    That is a torch ``x`` that (or another torch input that) needs a gradient while grad
    mode is on, lives on an accelerator or is bfloat16, or any input under
    ``torch.compile``. The vectorised path runs a fixed number of tensor operations
    whatever the batch size and never copies data to the host inside the computation.
    """
    if not array_api_compat.is_torch_array(x):
        return False
    import torch

    if torch.compiler.is_compiling():
        return True
    grad = torch.is_grad_enabled()
    return any(
        a.device.type != "cpu" or a.dtype == torch.bfloat16 or (grad and a.requires_grad)
        for a in (x, *others)
        if a is not None and array_api_compat.is_torch_array(a)
    )


def check_mode(check: Any) -> str | None:
    """``"async"`` for ``True``/``"async"``, ``"full"``, or None for ``False`` (no checks)."""
    if check is True or (isinstance(check, str) and check == "async"):
        return "async"
    if isinstance(check, str) and check == "full":
        return "full"
    if check is False:
        return None
    value_error(
        "check",
        "True or 'async' (checks on the device, no host wait), 'full' (exact errors, one "
        "host read per call) or False (no data checks)",
        repr(check),
    )


class Checks:
    """Data-dependent validations of the vectorised path, without a host wait by default.

    Each check is a 0-d bool tensor that is True when the input is fine, a function that
    raises the precise error (it may copy to the host: it runs only once its flag is known
    to be False) and a short phrase naming the problem. ``run`` finishes them by mode (see
    :mod:`poolkit.nn`): ``"full"`` copies all flags at once, one sync; ``"async"`` reads each
    flag directly on the CPU (host memory: nothing to wait for) and hands it to
    ``torch._assert_async`` on any other device and under ``torch.compile`` (which traces
    it), one tiny operation per check either way.
    """

    def __init__(self, mode: str = "async") -> None:
        self.mode = mode
        self._items: list[tuple[Any, Any, str]] = []

    def add(self, ok: Any, fail: Any, problem: str) -> None:
        self._items.append((ok, fail, problem))

    def run(self) -> None:
        items, self._items = self._items, []
        if not items:
            return
        import torch

        if self.mode == "full":
            flags = torch.stack([ok for ok, _, _ in items]).cpu().tolist()  # the one sync
            for flag, (_, fail, _) in zip(flags, items, strict=True):
                if not flag:
                    fail()
            return
        for ok, fail, problem in items:
            if ok.device.type == "cpu" and not torch.compiler.is_compiling():
                if not ok:
                    fail()
            else:
                torch._assert_async(
                    ok,
                    f"poolkit: invalid input ({problem}), found on the device. Call again with "
                    "check='full' (or on CPU tensors) for the exact error, which names the "
                    "row, span or value.",
                )


def device_mask(
    mask: Any, shape: tuple[int, ...], like: Any, arg: str, checks: Checks | None
) -> Any:
    """A 0/1 mask of ``shape`` as a bool tensor on ``like``'s device.

    Torch masks are checked on the device (the 0/1 test goes to ``checks``, skipped when it
    is None; shape and dtype are metadata, checked here); anything else is validated on the
    host by ``host_mask``, which needs no device sync, then moved over.
    """
    import torch

    if not isinstance(mask, torch.Tensor):
        return torch.as_tensor(host_mask(mask, shape, arg), device=like.device)
    if mask.dtype != torch.bool:
        if mask.dtype.is_floating_point or mask.dtype.is_complex:
            type_error(
                arg,
                "a bool or integer 0/1 array",
                f"dtype {dtype_name(mask)}",
                "Pass the tokenizer's mask as it is (int64) or as bool.",
            )
    if tuple(mask.shape) != shape:
        value_error(
            arg,
            f"of shape {shape} (the leading dimensions of `hidden`)",
            f"shape {tuple(mask.shape)}",
        )
    mask = mask.to(like.device)
    if mask.dtype == torch.bool:
        return mask
    real = mask != 0
    if checks is not None:
        # an integer equals its own != 0 test (as 0/1) exactly when it is 0 or 1
        checks.add(
            (mask == real).all(),
            lambda: host_mask(mask, shape, arg),
            f"`{arg}` holds a value other than 0 and 1",
        )
    return real


def finite_check(checks: Checks | None, out: Any, arg: str = "hidden") -> None:
    """Defer ``check_finite`` of a torch result to ``checks``."""
    if checks is not None:
        checks.add(
            all_finite(out),
            lambda: check_finite(array_api_compat.array_namespace(out), out, arg),
            "NaN or inf reached the result",
        )


def all_finite(out: Any) -> Any:
    """0-d bool tensor: no NaN or inf in ``out``, from one pass over it.

    The sum, accumulated in float64 (float32 on MPS), is finite exactly when every element
    is, unless finite values add up past the wide type's range (1e308: float32 results never
    do); ``x * 0 == 0`` holds for finite ``x`` only. Three operations, where
    ``torch.isfinite(out).all()`` dispatches five and writes a bool copy of ``out``.
    """
    import torch

    wide = torch.float32 if out.device.type == "mps" else torch.float64
    total = out.sum(dtype=wide)
    return total * 0 == 0


def result_dtype(x: Any) -> Any:
    """float64 for float64 torch input, else float32 (see ``float_hidden``)."""
    import torch

    return torch.float64 if x.dtype == torch.float64 else torch.float32
