"""What the two engines of ``poolkit embed`` share about a job: the settings its manifest
records, the one loop that feeds its work to a sink (:func:`run_job`), and how a job ends
early: stopped (Ctrl-C, SIGTERM) or failed, its finished work kept for ``--resume`` or its
work directory removed."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Generator
from typing import Any, NoReturn, TypeVar

__all__ = ["fail", "job_settings", "run_job", "stopped", "with_note"]

T = TypeVar("T")


def run_job(
    sink: Any,
    work: Generator[Any, None, None],
    finish: Callable[[], T],
    kept: Callable[[bool], str | None],
    cause: Callable[[Exception], Exception] = lambda e: e,
) -> T | int:
    """The loop of every ``poolkit embed`` job, local or Ray: each item of ``work`` (a
    generator of :class:`~poolkit.io.checkpoint.Part`, or of blocks of an input file's
    rows, computed as they are drawn) goes to ``sink.put`` (a checkpoint, the Ray shard set, or stdout), then
    ``finish()`` publishes the output and its value is returned.

    Ctrl-C or SIGTERM: :func:`stopped` with ``kept(False)`` (what ``--resume`` finds; None:
    nothing can be resumed, the interrupt goes on); returns 130/143. An error: ``cause(e)``
    (the error worth reporting, e.g. a worker's inside Ray's) is raised by :func:`fail`
    with ``kept(True)`` (None: nothing finished, ``sink`` is removed)."""
    try:
        with contextlib.closing(work) as items:  # a generator: its own cleanup runs first
            for item in items:
                sink.put(item)
        return finish()
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (cli._signals.Terminated)
        if (note := kept(False)) is None:
            sink.close()
            raise
        return stopped(sink, e, note)
    except Exception as e:
        fail(sink, cause(e), kept(True))
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
