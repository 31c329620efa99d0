"""The ``poolkit`` console script.

Subcommands live in modules of this package, each exposing ``add_parser(subparsers)``
(which sets ``func=run`` on its parser) and ``run(args) -> int``. :data:`COMMANDS` lists
them; a module that is not installed (e.g. ``compare``) is skipped.

Exit status: 0 success; 2 usage or input error, or a missing optional extra (one line on
stderr); 1 runtime error (one line on stderr); 130 Ctrl-C; 143 SIGTERM; ``--debug`` shows
the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from poolkit._version import __version__
from poolkit.cli._common import report_error
from poolkit.cli._signals import terminate_as_interrupt
from poolkit.cli._warnings import one_line_warnings

__all__ = ["COMMANDS", "build_parser", "main", "process_main"]

COMMANDS = (
    "embed",
    "inspect_model",
    "tokens",
    "spans",
    "compare",
    "export",
    "diagnose",
    "cache",
    "index",
    "search",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="poolkit",
        description="Sequence, token, word and span embeddings from transformer encoders.",
    )
    parser.add_argument("--version", action="version", version=f"poolkit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"poolkit.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"poolkit.cli.{name}":
                continue
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (also used as the console script)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # the provenance record's command
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        with terminate_as_interrupt(), one_line_warnings():
            return int(args.func(args) or 0)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM as Terminated (exit status 143)
        print(f"poolkit: {getattr(e, 'what', 'interrupted')}", file=sys.stderr)
        return getattr(e, "exit_status", 130)
    except Exception as e:
        if getattr(args, "debug", False):
            raise
        return report_error(e)


def process_main(argv: Sequence[str] | None = None) -> NoReturn:
    """The process's entry (the console script, ``python -m poolkit.cli``): ends the process
    with :func:`main`'s status. A stopped job (130, 143: its line printed, its checkpoint
    kept) ends it at once: at the interpreter's exit a Ray Data thread still running after
    ``ray.shutdown()`` has been seen to end a stopped ``--engine ray`` job with status 1."""
    status = main(argv)
    if status in (130, 143):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    process_main()
