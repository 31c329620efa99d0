"""What the two engines of ``poolkit embed`` share about a job: the settings its manifest
records, and the one loop that feeds its work to a sink and ends it: published, stopped
(Ctrl-C, SIGTERM) or failed, its finished work kept for ``--resume`` or removed
(:func:`run_job`)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Generator
from typing import Any, TypeVar

__all__ = ["job_settings", "run_job", "with_note"]

T = TypeVar("T")


def run_job(
    sink: Any,
    work: Generator[Any, None, None],
    finish: Callable[[], T],
    kept: Callable[[bool], str | None],
    cause: Callable[[Exception], Exception] = lambda e: e,
) -> T | int:
    """Every ``poolkit embed`` job's loop, local or Ray: each item of ``work`` goes to
    ``sink.put``, then ``finish()``'s value is returned. Stopped (Ctrl-C, SIGTERM): one line
    says what is ``kept(False)`` and the exit status (130/143) is returned (None: nothing to
    resume, the interrupt goes on). Failed: ``cause(e)`` is raised noting what is
    ``kept(True)`` (None: ``sink`` is removed)."""
    try:
        with contextlib.closing(work) as items:  # a generator: its own cleanup runs first
            for item in items:
                sink.put(item)
        return finish()
    except KeyboardInterrupt as e:
        if (note := kept(False)) is None:
            sink.close()
            raise
        sink.close()
        print(f"poolkit: {getattr(e, 'what', 'interrupted')}; {note} in {sink.path}: rerun the "
              "same command with --resume to continue.", file=sys.stderr)  # fmt: skip
        return int(getattr(e, "exit_status", 130))
    except Exception as e:
        error, note = cause(e), kept(True)
        if note is None:
            sink.discard()
            raise error from error.__cause__  # its own cause, as raised
        sink.close()
        raise with_note(error, note=f"({note} in {sink.path}; fix the problem and rerun with "
                        "--resume.)") from error  # fmt: skip
    except BaseException:
        sink.close()
        raise


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


def with_note(error: Exception, *, note: str) -> Exception:
    """The same error with ``note`` after its fix (the CLI prints one line)."""
    from poolkit.errors import PoolkitError

    if isinstance(error, PoolkitError):
        return error.but(fix=f"{error.fix} {note}".strip())
    try:
        return type(error)(f"{error} {note}")
    except Exception:
        return error
