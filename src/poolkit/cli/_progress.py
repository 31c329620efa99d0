"""Progress where no terminal is: a plain line on stderr every ~30 s (``POOLKIT_PROGRESS_SECONDS``
sets the interval), so that a job run in the background, its stderr in a log file, shows
it is alive: rows done, rate, and the time left when the input's size is known.

``poolkit: embedding: 12,288 of 40,000 texts (31%), 410.2 texts/s, about 68 s left``
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import IO

__all__ = ["INTERVAL_VARIABLE", "PlainProgress", "count_rows", "interval"]

INTERVAL_VARIABLE = "POOLKIT_PROGRESS_SECONDS"
DEFAULT_INTERVAL = 30.0


def interval() -> float:
    """Seconds between lines: ``POOLKIT_PROGRESS_SECONDS`` (a positive number), else 30."""
    raw = os.environ.get(INTERVAL_VARIABLE, "")
    try:
        value = float(raw)
    except ValueError:
        return DEFAULT_INTERVAL
    return value if value > 0 else DEFAULT_INTERVAL


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class PlainProgress:
    """A tqdm-like counter (``update(n)``, ``close()``) printing one line every
    ``every`` seconds; ``total`` (None: unknown) gives the share done and the time left.
    ``clock`` is injectable for tests."""

    def __init__(
        self,
        unit: str,
        total: int | None = None,
        every: float | None = None,
        stream: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.unit, self.total, self.n = unit, total, 0
        self.every = interval() if every is None else every
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.start = self.last = clock()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        if now - self.last >= self.every:
            self.last = now
            print(self.line(now), file=self.stream, flush=True)

    def line(self, now: float) -> str:
        """The progress line at time ``now``."""
        rate = self.n / max(now - self.start, 1e-9)
        done = f"{self.n:,} {self.unit}"
        left = ""
        if self.total:
            done = f"{self.n:,} of {self.total:,} {self.unit} ({100 * self.n / self.total:.0f}%)"
            if rate > 0 and self.n < self.total:
                left = f", about {_duration((self.total - self.n) / rate)} left"
        return f"poolkit: embedding: {done}, {rate:.1f} {self.unit}/s{left}"

    def close(self) -> None:
        """Nothing to release (the summary line follows)."""


def count_rows(path: str, fmt: str | None) -> int | None:
    """The texts of an input, counted cheaply where its format allows: a Parquet file's
    row count, a ``.txt`` file's lines, a ``.jsonl`` file's non-blank lines; None for
    stdin and CSV/TSV (quoted line ends)."""
    from poolkit.io.readers import input_format

    if path == "-" or not os.path.isfile(path):
        return None
    try:
        kind = input_format(path, fmt)
    except ValueError:
        return None
    if kind == "parquet":
        import pyarrow.parquet as pq

        try:
            return int(pq.ParquetFile(path).metadata.num_rows)
        except Exception:  # the reader says what is wrong with it, in its own words
            return None
    if kind not in ("txt", "jsonl"):
        return None
    lines = 0
    with open(path, "rb") as f:
        for line in f:
            lines += 1 if kind == "txt" or line.strip() else 0
    return lines
