"""``poolkit embed ... -o -``: JSON Lines on stdout, part by part, as they are embedded.

:class:`StdoutSink` stands in for the :class:`~poolkit.io.checkpoint.Checkpoint` of a file
output: same ``commit`` / ``publish`` / ``close`` / ``discard``, but each part goes to
stdout at once (lines as in a ``.jsonl`` output) and nothing is kept for ``--resume``.
Parts made only of blank texts are held back until a real text arrives, so that an input
of blank texts only is refused with nothing written, as for a file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from poolkit.io.writers import jsonl_rows

__all__ = ["StdoutSink"]


class StdoutSink:
    """Writes committed parts to stdout as JSON Lines (see the module docstring).

    Args:
        strategies: the columns of each line, in order.
        blank: the ids of blank texts seen so far (the caller extends it before each
            ``commit``).
    """

    path = "<stdout>"

    def __init__(self, strategies: Sequence[str], blank: list[int]) -> None:
        self.strategies = list(strategies)
        self.blank = blank
        self.done: set[int] = set()  # nothing to resume from
        self._held: list[str] = []

    def commit(
        self,
        index: int,
        first_row: int,
        digest: str,
        arrays: Mapping[str, np.ndarray],
        *,
        ids: np.ndarray | None = None,
        columns: Mapping[str, Any] | None = None,
        texts: int | None = None,
    ) -> None:
        """Write part ``index`` (rows ``first_row`` ..., or ``ids`` with their extra
        ``columns``, as :meth:`Checkpoint.commit <poolkit.io.checkpoint.Checkpoint.commit>`
        takes them) to stdout; ``digest`` and ``texts`` are unused."""
        if ids is not None:  # --chunks: rows of their own, with their document ids
            if len(ids):
                self._held.append(jsonl_rows(ids, arrays, self.strategies, columns))
                self._flush()
            return
        n = len(next(iter(arrays.values())))
        text = jsonl_rows(np.arange(first_row, first_row + n), arrays, self.strategies)
        self._held.append(text)
        if len(self.blank) < first_row + n:  # a real text arrived: write what was held
            self._flush()

    def publish(
        self, num_parts: int, strategies: list[str], *, overwrite: bool, metadata: object = None
    ) -> str:
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
