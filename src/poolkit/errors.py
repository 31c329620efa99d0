"""One exception family: everything poolkit raises on purpose derives from ``PoolkitError``.

Catch ``PoolkitError`` for all of them, or the few kinds users act on differently. Each
kind also derives from the built-in exception it always was (``ValueError``,
``RuntimeError``, ``ImportError``), so existing ``except ValueError`` code keeps working.

=========================  ===================================================
``InputError``             bad input: a file, a text, an argument, a recipe
``InputTypeError``         an argument of the wrong type (a ``TypeError``)
``OutputExistsError``      an output that exists and may not be replaced
``RunError``               a run that could not finish as asked (a file changed under it)
``ModelNotFoundError``     a model reference that resolves to nothing
``ExportError``            a compiled (ONNX) export failed or failed its check
``MissingDependencyError`` an optional extra is not installed (names the pip command)
``PipelineError``          a model pipeline module poolkit cannot apply (names the way out)
=========================  ===================================================

``poolkit.io.DiskFullError`` (an ``OSError``) is one too: a file written without room for it.

An error carries what was wrong as fields, not only as text: ``arg`` (the argument),
``index`` (which element of it), ``expected``, ``got``, ``fix`` and ``where`` (the file and
line); ``str(error)`` renders them with :func:`poolkit._errors.render`, the one renderer,
which the command line calls with its flag table (``arg`` -> ``--flag``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

__all__ = [
    "ExportError",
    "InputError",
    "InputTypeError",
    "MissingDependencyError",
    "ModelNotFoundError",
    "OutputExistsError",
    "PipelineError",
    "PoolkitError",
    "RunError",
]


class PoolkitError(Exception):
    """Base of every error poolkit raises on purpose; the message says what to fix.

    Keyword fields (all optional; a positional ``message`` is free text):

    - ``arg``: the argument that was wrong (a library name: ``text_column``; the command
      line shows its flag); ``index``: the element of it (``3`` or ``(0, 1)``: ``arg[0][1]``);
    - ``expected`` and ``got``: what it should be and what it was ("Expected `arg` to be
      EXPECTED, but got GOT."); without ``arg``, a state: "Expected EXPECTED, but GOT.";
    - ``fix``: what to do; ``where``: the place in the input (``"a.jsonl: line 3"``).

    Texts (``message``, ``expected``, ``fix``) name other arguments as ```name```; the
    renderer writes each such name once, as Python or as the command line spells it.
    """

    # The one renderer, poolkit._errors.render, registers itself here when poolkit is imported
    # (this module imports nothing of poolkit, so the import graph has no cycle).
    renderer: ClassVar[Callable[[PoolkitError], str] | None] = None

    def __init__(
        self,
        message: str = "",
        *,
        arg: str | None = None,
        index: int | tuple[int, ...] | None = None,
        expected: str | None = None,
        got: object = None,
        fix: str = "",
        where: object = None,
    ) -> None:
        self.message, self.arg, self.index = message, arg, index
        self.expected, self.got, self.fix, self.where = expected, got, fix, where
        self.flags: Mapping[str, str] = {}  # the caller's own argument -> flag names
        super().__init__(self._text())

    def _text(self) -> str:
        render = PoolkitError.renderer
        return self.message if render is None else render(self)

    def __str__(self) -> str:
        return self._text()

    def but(self, **fields: Any) -> PoolkitError:
        """A copy with ``fields`` replaced (``arg``, ``index``, ``where``, ``fix``, ``flags``,
        ...): a caller that knows more (the whole argument, the input row) says it."""
        other = copy.copy(self)
        for name, value in fields.items():
            assert name in vars(other), name  # a field, not a new attribute
            setattr(other, name, value)
        other.args = (other._text(),)
        return other


class InputError(PoolkitError, ValueError):
    """Input that cannot be used as given (file, text, argument, recipe); the message says
    where and how to fix it."""


class InputTypeError(PoolkitError, TypeError):
    """An argument of the wrong type; the message names it and what it should be."""


class OutputExistsError(PoolkitError, FileExistsError):
    """An output that already exists, where the call may not replace it."""


class RunError(PoolkitError, RuntimeError):
    """A run that could not finish as asked: an input or a cache entry changed under it, or a
    job came back incomplete. Nothing half done was published."""


class ModelNotFoundError(PoolkitError, ValueError):
    """A model reference that is neither a local directory, an installed package, nor
    downloadable."""


class ExportError(PoolkitError, RuntimeError):
    """A compiled export could not be built or disagreed with the torch model; nothing was
    cached."""


class MissingDependencyError(PoolkitError, ImportError):
    """An optional dependency is missing; the message names the install command."""


class PipelineError(PoolkitError, ValueError):
    """A model's pipeline holds a module poolkit cannot apply to these vectors; the message
    names the module and the way out (``pipeline="pooled"``)."""
