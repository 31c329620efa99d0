"""The command line's one table of names: library argument -> the flag that sets it.

Library errors name arguments (``text_column``, ``overwrite=True``); the command line shows
the flag instead. :func:`namer` gives :func:`poolkit._errors.render` the name to write, from
:data:`FLAGS` and, first, the names a command gave the error with :func:`flagged` (the same
argument can be set by different flags: ``recipe`` is ``--recipe`` in ``embed`` and
``--recipes`` in ``compare``). Nothing rewrites a message's text.
"""

from __future__ import annotations

from collections.abc import Mapping

from poolkit._errors import Namer
from poolkit.errors import InputError, PoolkitError

__all__ = ["FLAGS", "flagged", "namer"]

# Every `NAME_column` argument is the flag --NAME-column (see flag_for).
FLAGS: Mapping[str, str] = {
    "fmt": "--input-format", "overwrite=True": "--overwrite", "resume=True": "--resume",
    "split": "--split", "train": "--train", "pipeline='pooled'": "--pooled-only",
    "format='onnx'": "--format onnx", "prompt_name": "--prompt-name", "prompt": "--prompt",
    "chunks": "--chunks", "prompt='...'": "--prompt '...'",
    "format='sentence-transformers'": "--format sentence-transformers",
}  # fmt: skip

# The names one command (or one of its steps) gives library arguments, over FLAGS.
RECIPE = {"recipe": "--recipe", "strategy": "--strategy", "layers": "--layers",
          "layer_how": "--layers", "normalize": "--normalize", "dims": "--dims",
          "precision": "--precision"}  # fmt: skip
LATE_CHUNKS = {"recipe": "--recipe/--strategy", "late=False": "drop --late"}
COMPARE_RECIPES = {"recipe": "--recipes", "strategy": "--recipes", "strategies": "--recipes",
                   "layers": "--layers"}  # fmt: skip
COMPARE_BUDGET = {"dims": "--dims"}
COMPARE_CHUNKS = {"chunk_tokens": "--chunk-tokens"}
DIAGNOSE = {"vectors": "VECTORS", "texts": "TEXTS", "prompts": "--prompt", "tol": "--tol",
            "model": "--model"}  # fmt: skip
EXPORT = {"recipe": "--recipe", "from_compare": "--from-compare", "out_dir": "-o",
          "format": "--format", "quantize": "--quantize", "overwrite": "--overwrite",
          "model": "MODEL", "calibration": "--calibrate FILE (or --ranges FILE)"}  # fmt: skip
MULTIVECTOR = {"prompt_name": "--prompt-name", "prompt": "--prompt", "dims": "--recipe",
               "dim_proj": "--recipe"}  # fmt: skip


def flag_for(name: str, own: Mapping[str, str] | None = None) -> str | None:
    """The flag that sets library argument ``name`` (``own`` first, then :data:`FLAGS`, then
    ``NAME_column`` -> ``--NAME-column``); None: it has none, name it as Python does."""
    if own and name in own:
        return own[name]
    if name in FLAGS:
        return FLAGS[name]
    head, _, tail = name.rpartition("_")
    if tail == "column" and head.isidentifier() and head.islower():
        return "--" + "-".join([*head.split("_"), "column"])
    return None


def namer(error: BaseException) -> Namer:
    """How the command line names the arguments ``error`` names."""
    own = error.flags if isinstance(error, PoolkitError) else None
    return lambda name: flag_for(name, own)


def flagged(error: BaseException, names: Mapping[str, str]) -> PoolkitError:
    """``error`` with ``names`` (argument -> flag) for its arguments: a command's step that
    sets library arguments through its own flags says so. A ``ValueError``/``TypeError`` from
    outside the family becomes an :class:`InputError` with its text."""
    if not isinstance(error, PoolkitError):
        error = InputError(str(error))
    return error.but(flags={**error.flags, **names})
