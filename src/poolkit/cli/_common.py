"""Options, progress and error reporting shared by the subcommands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from poolkit import errors
from poolkit._errors import missing_extra, render, value_error
from poolkit.cli._flags import namer
from poolkit.model_folder import DEFAULT_MODEL

__all__ = [
    "add_common",
    "add_input_format",
    "add_model_or_positional",
    "error_line",
    "exit_status",
    "guess_note",
    "model_given",
    "progress_bar",
    "quiet_truncation",
    "report_error",
    "require_extra",
    "text_parts",
]

# What the user fixes by changing the command line, the input or the installed extras
# (exit status 2: nothing has run yet); any other error is a run that failed (1). In the
# family its class decides; outside it, a missing or wrong file, a bad value from a library.
_USER_ERRORS = (errors.InputError, errors.InputTypeError, errors.ModelNotFoundError,
                errors.PipelineError, errors.MissingDependencyError)  # fmt: skip
_USER_OUTSIDE = (FileNotFoundError, IsADirectoryError, NotADirectoryError, ValueError, TypeError)


def exit_status(error: BaseException) -> int:
    """2 for an error in the user's input or command line, 1 for a run that failed."""
    family = isinstance(error, errors.PoolkitError)
    return 2 if isinstance(error, _USER_ERRORS if family else _USER_OUTSIDE) else 1


def error_line(error: BaseException) -> str:
    """``error``'s message on one line, naming flags where the library names arguments."""
    text = render(error, namer(error)) if isinstance(error, errors.PoolkitError) else str(error)
    return " ".join(text.split())


def report_error(error: BaseException) -> int:
    """Print one line on stderr and return the exit status (2 usage/input, 1 runtime)."""
    message = error_line(error) or type(error).__name__
    status = exit_status(error)
    if status == 2:
        print(f"poolkit: error: {message}", file=sys.stderr)
        return 2
    print(
        f"poolkit: error: {_kind(error)}: {message} (rerun with --debug for details)",
        file=sys.stderr,
    )
    return status


def _kind(error: BaseException) -> str:
    """The name printed before a runtime error's message: the family's generic kinds go by
    the built-in kind they always were (RuntimeError, FileExistsError)."""
    if isinstance(error, (errors.RunError, errors.OutputExistsError)):
        return next(c.__name__ for c in type(error).__mro__ if c.__module__ == "builtins")
    return type(error).__name__


def require_extra(flag: str, module: str, package: str, extra: str) -> None:
    """Raise :class:`MissingDependencyError` unless ``module`` can be imported: "FLAG needs
    PACKAGE, which is not installed: pip install 'poolkit[EXTRA]'" (exit status 2), before
    any work starts. Found, not imported: a run that never reaches it (scikit-learn takes
    1.5 s to import) does not pay for it."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or blocked in sys.modules
        found = False
    if not found:
        raise errors.MissingDependencyError(missing_extra(flag, package, extra)) from None


def guess_note(info: Any, then: str = "using {pooling} — pass --recipe to choose") -> str:
    """The line shown when no file of the model states its pooling (``info``: ModelInfo);
    ``then`` says what the command does about it."""
    return f"no file states this model's pooling; {then.format(pooling=info.pooling)}"


def add_input_format(parser: argparse.ArgumentParser) -> None:
    """--text-column and --input-format, for commands that read INPUT's texts."""
    parser.add_argument("--text-column", default=None, metavar="C",
                        help="field/column with the text (default: 'text', or the only column)")  # fmt: skip
    parser.add_argument("--input-format", default=None,
                        choices=["txt", "jsonl", "csv", "tsv", "parquet"],
                        help="format of INPUT (default: from its extension; stdin: txt)")  # fmt: skip


def add_texts(parser: argparse.ArgumentParser, input_help: str, text_help: str,
              *, many: bool = True) -> None:  # fmt: skip
    """INPUT (optional) and ``--text``/``-t`` instead of it (``many``: repeatable, and
    --text-column, --input-format)."""
    parser.add_argument("input", nargs="?", default=None, metavar="INPUT", help=input_help)
    parser.add_argument("--text", "-t", action="append" if many else "store", default=None,
                        help=text_help)  # fmt: skip
    if many:  # texts read like embed's INPUT
        add_input_format(parser)


_MODEL_HELP = f"model directory or hub id (default: {DEFAULT_MODEL})"


def add_model_or_positional(parser: argparse.ArgumentParser) -> None:
    """--model, and MODEL: its old spelling as a positional, still accepted (not both;
    :func:`model_given` reads them)."""
    parser.add_argument("--model", "-m", default=None, help=_MODEL_HELP)
    parser.add_argument("model_positional", nargs="?", default=None, metavar="MODEL",
                        help="the same as --model (the old spelling)")  # fmt: skip


def model_given(args: argparse.Namespace) -> Any:
    """The model named by --model or MODEL (both: refused in one line); None: neither."""
    if args.model is not None and args.model_positional is not None:
        value_error("--model", "given once", f"both --model {args.model} and MODEL "
                    f"{args.model_positional}", "Drop MODEL (the old spelling).")  # fmt: skip
    return args.model if args.model is not None else args.model_positional


# add_common's options: (flags, keywords), the model's first.
_MODEL_OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("--model", "-m"), {"default": None, "help": _MODEL_HELP}),
    (("--max-length",), {"type": int, "default": None, "metavar": "N",
     "help": "tokens per text, special tokens included (default: the model's)"}),
    (("--device",), {"default": "auto",
     "help": "auto (CUDA, then MPS, then CPU), cpu, cuda, cuda:1, mps (default: auto)"}),
    (("--dtype",), {"default": None, "choices": ["float32", "float16", "bfloat16"],
     "help": "weights and activations (default: float32; on CUDA the checkpoint's stored "
     "type, as sentence-transformers loads it)"}),
    (("--batch-tokens",), {"type": int, "default": None, "metavar": "N",
     "help": "token budget per forward batch (default: 2048 on CPU; on CUDA sized to the "
     "GPU's free memory and the model, 1024 to 131072; 16384 on other accelerators)"}),
    (("--long-text",), {"choices": ["truncate", "window"], "default": "truncate",
     "help": "texts over the max length: cut (counted) or embed in windows (default: truncate)"}),
)  # fmt: skip
_RUN_OPTIONS: tuple[tuple[tuple[str, ...], dict[str, Any]], ...] = (
    (("--quiet", "-q"), {"action": "store_true", "help": "no progress bar or summary"}),
    (("--debug",), {"action": "store_true", "default": argparse.SUPPRESS,
     "help": "show tracebacks"}),
)  # fmt: skip


def add_common(parser: argparse.ArgumentParser, *, model: bool = True) -> None:
    """--model, --max-length, --device, --dtype, --batch-tokens, --long-text (``model``),
    --quiet, --debug; a subcommand's own variant of one, defined first, is kept."""
    for flags, keywords in (*(_MODEL_OPTIONS if model else ()), *_RUN_OPTIONS):
        if not any(flag in parser._option_string_actions for flag in flags):
            parser.add_argument(*flags, **keywords)


def positive(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        value_error(flag, "a positive integer", value)


def positives(args: argparse.Namespace, *flags: str) -> None:
    """:func:`positive` for each flag's value in ``args`` (``--max-length``: ``max_length``)."""
    for flag in flags:
        positive(getattr(args, flag[2:].replace("-", "_")), flag)


@contextmanager
def quiet_truncation(args: Any) -> Iterator[None]:
    """With --quiet, no notice of truncated texts (embed's --quiet drops it from its summary)."""
    import warnings

    from poolkit.driver import TruncationWarning

    with warnings.catch_warnings():
        if getattr(args, "quiet", False):
            warnings.simplefilter("ignore", TruncationWarning)
        yield


@contextmanager
def progress_bar(args: Any, unit: str = "texts", total: int | None = None) -> Iterator[Any]:
    """A tqdm bar on stderr; where stderr is not a terminal, a plain line every ~30 s
    (:class:`~poolkit.cli._progress.PlainProgress`); nothing with --quiet. ``total``: the
    texts expected (None: unknown)."""
    from tqdm.auto import tqdm

    quiet = bool(getattr(args, "quiet", False))
    if not quiet and not sys.stderr.isatty():
        from poolkit.cli._progress import PlainProgress

        yield PlainProgress(unit, total)
        return
    bar = tqdm(total=total, unit=unit, file=sys.stderr, disable=quiet, dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()


def text_parts(args: Any, part_size: int = 4096) -> Iterator[list[str]]:
    """Texts from ``args.input`` (or ``--text``), ``part_size`` at a time (``--text``: one
    part)."""
    from poolkit.io.readers import read_texts

    if getattr(args, "text", None):
        yield list(args.text)
        return
    if args.input is None:
        value_error("INPUT", "a file (or '-' for stdin), or --text given", "neither")
    yield from read_texts(
        args.input,
        text_column=getattr(args, "text_column", None),
        fmt=getattr(args, "input_format", None),
        chunk_size=part_size,  # the reader's keyword for the texts per list
    )
