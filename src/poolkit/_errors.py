"""One message template for every error poolkit raises.

Messages read "Expected `arg` to be <expected>, but got <got>." followed by the fix, so
that a user sees which argument was wrong without reading a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NoReturn

from poolkit.errors import InputError, InputTypeError


def expected(arg: str, what: str, got: object, fix: str = "") -> str:
    """Build the standard message: names the argument, the expectation and the input.

    ``arg`` is a library argument (written `arg`), or a command-line flag or metavar
    (``--workers``, ``INPUT``: written bare, as :func:`with_flags` writes flags)."""
    name = arg if arg.startswith("-") or arg.isupper() else f"`{arg}`"
    msg = f"Expected {name} to be {what}, but got {got}."
    return f"{msg} {fix}".rstrip() if fix else msg


def value_error(arg: str, what: str, got: object, fix: str = "") -> NoReturn:
    """Raise :class:`~poolkit.errors.InputError` (a ``ValueError``) with :func:`expected`."""
    raise InputError(expected(arg, what, got, fix))


def type_error(arg: str, what: str, got: object, fix: str = "") -> NoReturn:
    """Raise :class:`~poolkit.errors.InputTypeError` (a ``TypeError``) with :func:`expected`."""
    raise InputTypeError(expected(arg, what, got, fix))


def already_exists(
    path: object, note: str = "", *, fix: str = "`overwrite=True`", state: str = "already exists"
) -> str:
    """The one refusal to replace an output: "PATH: already exists; pass FIX to replace it."
    Library code names `overwrite=True` (the command line reports it as --overwrite);
    ``note`` says what is kept, in parentheses; ``state`` words what was found."""
    msg = f"{path}: {state}; pass {fix} to replace it"
    return f"{msg} ({note})." if note else f"{msg}."


def unmet(what: str, but: str, fix: str = "") -> str:
    """A check on a state, not on one argument (a job's output, a file another tool wrote):
    "Expected <what>, but <but>." followed by the fix or the consequence."""
    msg = f"Expected {what}, but {but}."
    return f"{msg} {fix}" if fix else msg


def arg_names(names: Sequence[str]) -> str:
    """Argument names as a message writes them: "`a`", "`a` and `b`", "`a`, `b` and `c`"."""
    quoted = [f"`{n}`" for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"


def short_list(items: object, limit: int = 8) -> str:
    """Render the first few items of a sequence, with the count of the rest."""
    seq = list(items)  # type: ignore[call-overload]
    head = ", ".join(str(x) for x in seq[:limit])
    return head if len(seq) <= limit else f"{head}, ... ({len(seq) - limit} more)"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` in the right number: "1 text", "2 texts", "1 CPU"."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


# The family's kind for a missing optional dependency (poolkit.MissingDependencyError).


def missing_extra(feature: str, package: str, extra: str) -> str:
    """The one line for a missing optional dependency: what needs what, and the fix."""
    return f"{feature} needs {package}, which is not installed: pip install 'poolkit[{extra}]'"


def renamed(message: str, arg: str) -> str:
    """``message`` (built by :func:`expected`) naming ``arg`` instead of the argument it named:
    a part's message raised for the whole (a recipe name's strategy part -> `recipe`)."""
    return re.sub(r"^Expected `[^`]+`", lambda _: f"Expected `{arg}`", message)


def with_flags(message: str, flags: dict[str, str]) -> str:
    """``message`` with each argument name written `name` replaced by its command-line flag:
    library messages name arguments, the command line names flags."""
    for name, flag in flags.items():
        message = message.replace(f"`{name}`", flag)
    return message
