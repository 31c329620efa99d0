"""What the two engines of ``poolkit embed`` share about a job: the settings its manifest
records, and how a job ends early: stopped (Ctrl-C, SIGTERM) or failed, its finished work
kept for ``--resume`` or its work directory removed."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

__all__ = ["fail", "installed_versions", "job_settings", "stopped", "with_note"]


def job_settings(
    args: argparse.Namespace, head: dict[str, Any], engine: dict[str, Any], versions: dict[str, Any]
) -> dict[str, Any]:
    """Everything a job's vectors depend on, as its manifest records them: a resumed job
    must present equal settings (compared key by key, in any order).

    ``head``: the model and the pooling, as the engine knows them before the job starts;
    ``engine``: the engine's own keys (the local engine records what its loaded Encoder
    settled on, Ray what was asked of its workers); ``versions``: installed packages."""
    return {
        **head,
        "long_text": args.long_text,
        "backend": args.backend,
        "quantize": args.quantize,
        # Key kept from before --part-size: work directories of older versions still resume.
        "chunk_size": args.part_size,
        "text_column": args.text_column,
        "dtype": args.dtype,
        **engine,
        "versions": versions,
    }


def installed_versions(*names: str) -> dict[str, str | None]:
    """poolkit's version and each package's installed one (None if absent), from package
    metadata: importing torch just to ask costs seconds."""
    from importlib.metadata import PackageNotFoundError, version

    from poolkit import __version__

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {"poolkit": __version__, **{name: installed(name) for name in names}}


def with_note(error: Exception, note: str) -> Exception:
    """The same kind of error with ``note`` appended (the CLI prints one line)."""
    try:
        return type(error)(f"{error} {note}")
    except Exception:
        return error


def stopped(work: Any, stop: BaseException, kept: str) -> int:
    """The job was stopped (Ctrl-C, or SIGTERM as :class:`poolkit.cli._signals.Terminated`):
    ``work`` (the work directory) is closed with what it holds, one line says what is
    ``kept`` (e.g. "3 parts are kept") and how to go on; returns the exit status (130/143)."""
    work.close()
    print(
        f"poolkit: {getattr(stop, 'what', 'interrupted')}; {kept} in {work.path}: rerun the "
        "same command with --resume to continue.",
        file=sys.stderr,
    )
    return int(getattr(stop, "exit_status", 130))


def fail(work: Any, error: Exception, kept: str | None) -> NoReturn:
    """Raise ``error`` of a failed job: with finished work (``kept`` says what), ``work`` is
    closed and the error notes how to resume; without (None), ``work`` is removed."""
    if kept is None:
        work.discard()
        raise error
    work.close()
    raise with_note(
        error, f"({kept} in {work.path}; fix the problem and rerun with --resume.)"
    ) from error
