"""One message template, and one renderer, for every error poolkit raises.

Messages read "Expected `arg` to be <expected>, but got <got>." followed by the fix, so
that a user sees which argument was wrong without reading a traceback. An error carries
those parts as fields (:class:`poolkit.errors.PoolkitError`); :func:`render` writes them,
naming arguments as Python does (```text_column```) or, given the command line's table,
as its flags (``--text-column``). No message is rewritten after it was rendered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

from poolkit.errors import InputError, InputTypeError, PoolkitError

E = TypeVar("E", bound=PoolkitError)

# An argument's name -> how to write it (None: as Python writes it, ```name```).
Namer = Callable[[str], "str | None"]


def _python_name(name: str) -> str | None:
    return None


def arg_text(name: str, namer: Namer = _python_name) -> str:
    """An argument as a message names it: its flag where ``namer`` has one; a flag or a
    metavar (``--workers``, ``INPUT``) as typed; else ```name```."""
    flag = namer(name)
    if flag is not None:
        return flag
    return name if name.startswith("-") or name.isupper() else f"`{name}`"


def markup(text: str, namer: Namer = _python_name) -> str:
    """``text`` with each ```name``` (an argument reference) written by ``namer``: a
    template, read once here; a text without balanced backticks is left as written."""
    pieces = text.split("`")
    if len(pieces) % 2 == 0:
        return text
    return "".join(p if i % 2 == 0 else _ref(p, namer) for i, p in enumerate(pieces))


def _ref(name: str, namer: Namer) -> str:
    flag = namer(name)
    return f"`{name}`" if flag is None else flag


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else f"{text}."


def render(error: PoolkitError, namer: Namer = _python_name) -> str:
    """The one line ``error`` says: "[WHERE: ]Expected `arg` to be EXPECTED, but got GOT.
    FIX", "Expected EXPECTED, but GOT. FIX" (a state), or its message; every argument
    it names written by ``namer`` (default: as Python names them)."""
    arg, index = error.arg, error.index
    name = None
    if arg is not None:
        at = (index,) if isinstance(index, int) else (index or ())
        at_text = "".join(f"[{i}]" for i in at)
        flag = namer(arg)
        name = f"{flag}{at_text}" if flag is not None else arg_text(arg + at_text)
    if error.expected is not None:
        what = markup(error.expected, namer)
        if name is not None:
            body = f"Expected {name} to be {what}, but got {error.got}."
        else:
            body = f"Expected {what}, but {error.got}."
        if error.message:
            body = f"{_sentence(markup(error.message, namer))} {body}"
    elif name is not None:
        body = f"{name}: {markup(error.message, namer)}" if error.message else name
    else:
        body = markup(error.message, namer)
    if error.where is not None:
        body = f"{error.where}: {body}"
    if error.fix:
        body = f"{_sentence(body)} {markup(error.fix, namer)}" if body else markup(error.fix, namer)
    return body


def expected(arg: str, what: str, got: object, fix: str = "") -> str:
    """Build the standard message: names the argument, the expectation and the input.

    ``arg`` is a library argument (written `arg`), or a command-line flag or metavar
    (``--workers``, ``INPUT``: written bare, as the command line writes flags)."""
    name = arg if arg.startswith("-") or arg.isupper() else f"`{arg}`"
    msg = f"Expected {name} to be {what}, but got {got}."
    return f"{msg} {fix}".rstrip() if fix else msg


def recast(error: BaseException, kind: type[E]) -> PoolkitError:
    """``error`` as a ``kind`` with the same fields (a part's error raised as the whole's
    kind); an error from outside the family keeps its text."""
    if not isinstance(error, PoolkitError):
        return kind(str(error))
    out = kind(error.message, arg=error.arg, index=error.index, expected=error.expected,
               got=error.got, fix=error.fix, where=error.where)  # fmt: skip
    out.flags = error.flags
    return out


Index = int | tuple[int, ...] | None


def value_error(
    arg: str, what: str, got: object, fix: str = "", *, index: Index = None
) -> NoReturn:
    """Raise :class:`~poolkit.errors.InputError` (a ``ValueError``): ``arg`` (its element
    ``index``) was not ``what``."""
    raise InputError(arg=arg, index=index, expected=what, got=got, fix=fix)


def type_error(arg: str, what: str, got: object, fix: str = "", *, index: Index = None) -> NoReturn:
    """Raise :class:`~poolkit.errors.InputTypeError` (a ``TypeError``): ``arg`` (its element
    ``index``) was not ``what``."""
    raise InputTypeError(arg=arg, index=index, expected=what, got=got, fix=fix)


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


PoolkitError.renderer = render  # str(error) for every error of the family
