"""``poolkit embed ... -o -``: JSON Lines on stdout, part by part, as they are embedded."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

import numpy as np

from poolkit.io.checkpoint import Part
from poolkit.io.writers import jsonl_rows

__all__ = ["StdoutSink"]


class StdoutSink:
    """A :class:`~poolkit.io.checkpoint.Checkpoint`'s ``put``/``publish``/``close``/``discard``
    writing each part to stdout at once, ``.jsonl`` lines of the columns ``strategies``, and
    keeping nothing for ``--resume``. Parts of blank texts only (``blank``: their ids so far,
    extended by the caller) are held back until a real text arrives, so that an input of
    blank texts only is refused with nothing written."""

    path = "<stdout>"

    def __init__(self, strategies: Sequence[str], blank: list[int]) -> None:
        self.strategies = list(strategies)
        self.blank = blank
        self.done: set[int] = set()  # nothing to resume from
        self._held: list[str] = []

    def put(self, part: Part) -> None:
        """Write ``part`` (computed: this sink resumes nothing) to stdout: its rows from
        ``first_row`` on, or its ``ids`` with their extra ``columns`` (--chunks)."""
        assert part.arrays is not None
        if part.ids is not None:  # --chunks: rows of their own, with their document ids
            if len(part.ids):
                self._held.append(jsonl_rows(part.ids, part.arrays, self.strategies,
                                             part.columns))  # fmt: skip
                self._flush()
            return
        first, n = part.first_row, next(iter(part.arrays.values())).shape[0]
        self._held.append(jsonl_rows(np.arange(first, first + n), part.arrays, self.strategies))
        if len(self.blank) < first + n:  # a real text arrived: write what was held
            self._flush()

    def publish(self, num_parts: int, *, overwrite: bool) -> str:
        self._flush()
        return self.path

    def _flush(self) -> None:
        try:
            sys.stdout.write("".join(self._held))
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader stopped (`| head`): end quietly, as Unix filters do.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise SystemExit(141) from None  # 128 + SIGPIPE, what a shell reports
        self._held.clear()

    def close(self) -> None:
        """Nothing to release."""

    def discard(self) -> None:
        self._held.clear()
