"""SIGTERM handled like Ctrl-C, so that ``docker stop``, Kubernetes, Slurm and systemd
stop a job as cleanly as a user at the keyboard does.

Inside :func:`terminate_as_interrupt`, the first SIGTERM raises :class:`Terminated` (a
``KeyboardInterrupt``) in the main thread: every ``except KeyboardInterrupt`` / ``finally``
path that cleans up after Ctrl-C runs, and the CLI exits with 143 (128 + 15) instead of
130. Later SIGTERMs are ignored while that cleanup runs.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Terminated", "terminate_as_interrupt"]


class Terminated(KeyboardInterrupt):
    """Raised by SIGTERM inside :func:`terminate_as_interrupt`."""

    exit_status = 128 + signal.SIGTERM
    what = "terminated (SIGTERM)"


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into :class:`Terminated` for the duration (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = False

    def handler(signum: int, frame: Any) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise Terminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
