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
"""

from __future__ import annotations

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
    """Base of every error poolkit raises on purpose; the message says what to fix."""


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
