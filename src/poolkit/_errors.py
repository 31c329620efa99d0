"""One message template for every error poolkit raises.

Messages read "Expected `arg` to be <expected>, but got <got>." followed by the fix, so
that a user sees which argument was wrong without reading a traceback.
"""

from __future__ import annotations

from typing import NoReturn


def expected(arg: str, what: str, got: object, fix: str = "") -> str:
    """Build the standard message: names the argument, the expectation and the input."""
    msg = f"Expected `{arg}` to be {what}, but got {got}."
    return f"{msg} {fix}".rstrip() if fix else msg


def value_error(arg: str, what: str, got: object, fix: str = "") -> NoReturn:
    raise ValueError(expected(arg, what, got, fix))


def type_error(arg: str, what: str, got: object, fix: str = "") -> NoReturn:
    raise TypeError(expected(arg, what, got, fix))


def short_list(items: object, limit: int = 8) -> str:
    """Render the first few items of a sequence, with the count of the rest."""
    seq = list(items)  # type: ignore[call-overload]
    head = ", ".join(str(x) for x in seq[:limit])
    return head if len(seq) <= limit else f"{head}, ... ({len(seq) - limit} more)"
