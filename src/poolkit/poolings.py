"""A user's own pooling: ``f(token_states, attention_mask) -> vectors`` as a sequence strategy.

A function registered with :func:`register_pooling`, or installed by a package under the
entry-point group ``poolkit.poolings`` (``name = module:function``), is a sequence strategy
like the built-ins: ``name``, ``name@last4``, ``name+mean``, ``name/128``, ``name/int8``.

The function is called with torch tensors: ``token_states`` ``(B, L, H)`` float32 (float64
for float64 input), padded positions set to 0, and ``attention_mask`` ``(B, L)`` int64, 1
for the tokens it pools (for a ``_no_special`` part, the non-special ones), on the states'
device. It returns ``(B, D)``: a float torch tensor (or a NumPy array, converted). Its
result is checked on every call from metadata (2-D, one row per text, float) and, unless
the caller runs unchecked (``check=False``), for NaN/inf; a function that fails a check is
refused in one line naming it and the package it came from. ``D`` is read once per
hidden size from one call on a small random batch, before any model runs.

Entry points are read once, when a name is first looked up, and a plugin's module is
imported only when its name is used.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from poolkit._names import NO_SPECIAL, SEQUENCE_STRATEGIES
from poolkit.errors import InputError, InputTypeError

__all__ = [
    "GROUP",
    "UserPooling",
    "pooling_names",
    "register_pooling",
    "unregister_pooling",
    "user_pooling",
]

GROUP = "poolkit.poolings"
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")
# What a recipe name reads before or instead of a strategy: a level, a sparse strategy,
# the multi-vector strategy, an output segment.
_KEYWORDS = ("sequence", "word", "span", "sparse", "multivector", "tokens", "l2", "raw")

_lock = threading.Lock()
_registered: dict[str, UserPooling] = {}
_entries: dict[str, Any] | None = None  # name -> importlib.metadata.EntryPoint
_loaded: dict[str, UserPooling] = {}


@dataclass(frozen=True, eq=False)
class UserPooling:
    """One user pooling: ``name``, the function, and where it came from.

    Attributes:
        name: the strategy name recipes use.
        fn: ``(token_states (B, L, H), attention_mask (B, L)) -> (B, D)``.
        package: the distribution that declares the entry point (``None``: registered at
            run time with :func:`register_pooling`).
        version: that distribution's version.
        ref: ``"module:qualname"`` of the function (importable where the module is).
    """

    name: str
    fn: Callable[[Any, Any], Any]
    package: str | None = None
    version: str | None = None
    ref: str = ""
    _widths: dict[tuple[int, str], int] = field(default_factory=dict, repr=False)

    @property
    def plugin(self) -> str:
        """How messages name it: ``pooling 'pm' (plugin poolkit-pm 0.1, pm_pkg:power_mean)``."""
        where = (
            f"plugin {self.package} {self.version}".strip()
            if self.package
            else "registered with poolkit.register_pooling"
        )
        return f"pooling {self.name!r} ({where}, {self.ref})"

    def describe(self) -> dict[str, Any]:
        """What an exported folder records of it: name, package, version, function."""
        return {"name": self.name, "package": self.package, "version": self.version,
                "function": self.ref, "entry_point_group": GROUP if self.package else None}  # fmt: skip

    def __call__(self, hidden: Any, keep: Any, *, check: bool = True) -> Any:
        """The function on ``hidden`` ``(B, L, H)`` float torch and ``keep`` ``(B, L)`` bool
        (same device): ``(B, D)`` in ``hidden``'s float dtype (float32 for half input);
        rows without a kept token are zeros. ``check``: NaN/inf refused (a host read)."""
        import torch

        dtype = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        keep = keep.to(device=hidden.device, dtype=torch.bool)
        states = torch.where(keep[..., None], hidden.to(dtype), torch.zeros((), dtype=dtype,
                             device=hidden.device))  # fmt: skip
        out = self.fn(states, keep.to(torch.int64))
        out = self._checked(out, hidden.shape[0], hidden.device, check)
        zero = torch.zeros((), dtype=dtype, device=out.device)
        return torch.where(keep.any(dim=1)[:, None], out.to(dtype), zero)

    def _checked(self, out: Any, rows: int, device: Any, check: bool) -> Any:
        import numpy as np
        import torch

        if isinstance(out, np.ndarray):
            if not np.issubdtype(out.dtype, np.floating):
                self._refuse("a float result", f"a NumPy array of dtype {out.dtype}")
            out = torch.from_numpy(np.ascontiguousarray(out)).to(device)
        elif not isinstance(out, torch.Tensor):
            self._refuse("a torch tensor (or a NumPy array)", f"a {type(out).__name__}")
        if not out.dtype.is_floating_point:
            self._refuse("a float result", f"dtype {str(out.dtype).removeprefix('torch.')}")
        if out.ndim != 2 or out.shape[0] != rows:
            self._refuse(f"a result of shape ({rows}, D), one row per text",
                         f"shape {tuple(out.shape)}")  # fmt: skip
        if check and not torch.jit.is_tracing() and not torch.compiler.is_compiling():
            bad = ~torch.isfinite(out).all(dim=1)
            if bool(bad.any()):
                rows_bad = bad.nonzero()[:8, 0].tolist()
                self._refuse("finite values", f"NaN or inf in row(s) {rows_bad}")
        return out

    def _refuse(self, expected: str, got: str) -> Any:
        raise InputError(
            expected=f"the {self.plugin} to return {expected}",
            got=f"it returned {got}",
            fix="Fix the function: it gets token_states (B, L, H) and attention_mask (B, L) "
            "and returns (B, D) float vectors.",
        )

    def width(self, hidden_size: int, device: str = "cpu") -> int:
        """``D`` for token states of width ``hidden_size``: one checked call on a random
        ``(2, 3, hidden_size)`` batch (one row padded), kept for later calls."""
        import torch

        key = (hidden_size, device)
        if key not in self._widths:
            gen = torch.Generator().manual_seed(0)
            hidden = torch.randn(2, 3, hidden_size, generator=gen).to(device)
            keep = torch.tensor([[True, True, True], [True, True, False]], device=device)
            with torch.no_grad():
                out = self(hidden, keep)
            if out.shape[1] < 1:
                self._refuse("at least one dimension", f"shape {tuple(out.shape)}")
            self._widths[key] = int(out.shape[1])
        return self._widths[key]


def _builtins() -> tuple[str, ...]:
    from poolkit.levels import levels

    bare = (n for spec in levels(plugins=True).values() if spec.bare for n in spec.names)
    return (*SEQUENCE_STRATEGIES, *bare, *_KEYWORDS)


def _name_problem(name: Any) -> str | None:
    """Why ``name`` cannot name a user pooling; ``None`` when it can."""
    from poolkit.output import PRECISIONS

    if not isinstance(name, str) or not _NAME.match(name):
        return "not a lowercase identifier (a-z, 0-9, _; a letter first)"
    if name in _builtins() or name in PRECISIONS:
        return "the name of a built-in strategy or a recipe keyword"
    if name.endswith(NO_SPECIAL):
        return f"ending in {NO_SPECIAL} (the suffix that drops special tokens)"
    if re.fullmatch(r"top\d+|pool[\d.]+|muvera.*", name):
        return "read as a recipe segment"
    return None


def _ref(fn: Any) -> str:
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}:{getattr(fn, '__qualname__', type(fn).__name__)}"


def register_pooling(name: str, fn: Callable[[Any, Any], Any], *, overwrite: bool = False) -> None:
    """Make ``fn(token_states, attention_mask) -> vectors`` the sequence strategy ``name``.

    ``name``: a lowercase identifier that is not a built-in strategy or a recipe keyword;
    ``overwrite``: replace an earlier registration (or an installed plugin's) of ``name``.
    The function takes ``(B, L, H)`` float torch token states (padding zeroed) and the
    ``(B, L)`` int64 mask, and returns ``(B, D)`` float vectors (torch or NumPy).

    Raises:
        InputError: a bad or taken name, one line naming it.
        InputTypeError: ``fn`` is not callable.

    Example:
        >>> import poolkit
        >>> def first_last(h, mask):
        ...     last = mask.sum(1) - 1
        ...     return (h[:, 0] + h[range(len(h)), last]) / 2
        >>> poolkit.register_pooling("first_last", first_last)
        >>> poolkit.Recipe.parse("first_last@last4/l2").pooled_dim(384)
        384
        >>> poolkit.unregister_pooling("first_last")
    """
    if not callable(fn):
        raise InputTypeError(arg="fn", expected="a function (token_states, attention_mask) -> "
                             "vectors", got=type(fn).__name__)  # fmt: skip
    problem = _name_problem(name)
    if problem is not None:
        raise InputError(arg="name", expected="a lowercase identifier that is not a built-in "
                         "strategy or a recipe keyword", got=f"{name!r} for {_ref(fn)}, "
                         f"{problem}", fix="Choose another name, e.g. 'my_pooling'.")  # fmt: skip
    if not isinstance(overwrite, bool):
        raise InputTypeError(arg="overwrite", expected="True or False", got=repr(overwrite))
    taken = _registered.get(name) or _installed(name)
    if taken is not None and not overwrite:
        raise InputError(arg="name", expected="a name no pooling has yet",
                         got=f"{name!r}, the {taken.plugin}",
                         fix="Choose another name, or pass `overwrite=True`.")  # fmt: skip
    with _lock:
        _registered[name] = UserPooling(name, fn, ref=_ref(fn))


def unregister_pooling(name: str) -> None:
    """Forget the pooling registered at run time as ``name`` (an installed plugin's stays)."""
    with _lock:
        _registered.pop(name, None)


def user_pooling(name: str) -> UserPooling | None:
    """The user pooling called ``name`` (registered at run time first, then installed); None
    when there is none. Loading a plugin that fails is refused in one line naming it."""
    found = _registered.get(name)
    return found if found is not None else _installed(name)


def pooling_names() -> list[str]:
    """Every user pooling's name, registered or installed (no plugin is imported)."""
    return sorted({*_registered, *_entry_points()})


def shipped(names: Iterable[str]) -> dict[str, Callable[[Any, Any], Any]]:
    """The functions registered at run time among ``names``: what a process that does not
    share this one's registry (a Ray actor) must be given (:func:`install`)."""
    return {n: _registered[n].fn for n in names if n in _registered}


def install(functions: Mapping[str, Callable[[Any, Any], Any]]) -> None:
    """Register ``functions`` (from :func:`shipped`) here, replacing any of the same name."""
    for name, fn in functions.items():
        current = _registered.get(name)
        if current is None or current.fn is not fn:
            register_pooling(name, fn, overwrite=True)


def _entry_points() -> dict[str, Any]:
    """The group's entry points by name, read once; a name that cannot be a pooling is
    left out with one warning line naming its package."""
    global _entries
    if _entries is None:
        from importlib.metadata import entry_points

        found: dict[str, Any] = {}
        for ep in entry_points(group=GROUP):
            problem = _name_problem(ep.name)
            if problem is not None:
                warnings.warn(
                    f"poolkit: the plugin {_package(ep)} declares the pooling {ep.name!r} "
                    f"({ep.value}), {problem}; it is ignored. Rename its entry point.",
                    UserWarning,
                    stacklevel=3,
                )
                continue
            found.setdefault(ep.name, ep)
        _entries = found
    return _entries


def _package(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "(unknown package)"


def _installed(name: str) -> UserPooling | None:
    if name in _loaded:
        return _loaded[name]
    ep = _entry_points().get(name)
    if ep is None:
        return None
    dist = getattr(ep, "dist", None)
    package = dist.name if dist is not None else "(unknown package)"
    version = dist.version if dist is not None else None
    try:
        fn = ep.load()
    except Exception as e:  # an import error of the plugin's own code
        raise InputError(expected=f"the plugin {package} {version or ''} to load the pooling "
                         f"{name!r} ({ep.value})", got=f"it raised {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}".rstrip(": "),
                         fix="Reinstall or fix the plugin.") from None  # fmt: skip
    if not callable(fn):
        raise InputError(expected=f"the plugin {package} entry point {name} = {ep.value} to "
                         "name a function", got=f"it names a {type(fn).__name__}")  # fmt: skip
    with _lock:
        _loaded[name] = UserPooling(name, fn, package, version, ep.value)
    return _loaded[name]


def is_builtin(name: str) -> bool:
    """Whether ``name`` is a built-in sequence strategy (not a user pooling)."""
    return name in SEQUENCE_STRATEGIES
