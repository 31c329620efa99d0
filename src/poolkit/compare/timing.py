"""Times of a `compare` run: the model time spent inside the encoder's batches, and each
row's search time per call, repeated until it repeats (:func:`timed_search`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, TypeVar

__all__ = [
    "ROUNDS",
    "ROUND_SECONDS",
    "ROW_SECONDS",
    "SEARCH_TIMING",
    "TimedEncoder",
    "repeat_rounds",
    "timed_search",
]

T = TypeVar("T")

ROUNDS = 5  # rounds of repeated searches per row; the fastest is kept
ROUND_SECONDS = 0.02  # a round repeats the search until it took this long
ROW_SECONDS = 0.5  # at most this long repeating one row, so a large corpus stays cheap

SEARCH_TIMING = (
    f"wall-clock time per call, the fastest of {ROUNDS} rounds, each round repeating the "
    f"row's whole search (every query) until it took >= {ROUND_SECONDS * 1000:.0f} ms; "
    f"fewer rounds where they would take over {ROW_SECONDS:g} s, and a search slower than "
    f"that timed once"
)


class TimedEncoder:
    """Wraps an :class:`~poolkit.encoder.Encoder`; ``seconds`` accumulates the time spent
    producing batches in :meth:`iter_batches` (tokenising and the forward pass, not the
    pooling or scoring done between batches). Everything else is delegated."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.encoder, name)

    def iter_batches(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        batches = self.encoder.iter_batches(*args, **kwargs)
        while True:
            start = time.perf_counter()
            batch = next(batches, None)
            self.seconds += time.perf_counter() - start
            if batch is None:
                return
            yield batch


def repeat_rounds(search: Callable[[], Any], first: float) -> list[tuple[int, float]]:
    """``(calls, seconds)`` of each round of repeated ``search()`` calls, after a first
    call that took ``first`` seconds: :data:`ROUNDS` rounds of at least
    :data:`ROUND_SECONDS` each, as many as fit in :data:`ROW_SECONDS` (none for a search
    that slow)."""
    n_rounds = min(ROUNDS, int(ROW_SECONDS / max(first, ROUND_SECONDS)))
    rounds = []
    for _ in range(n_rounds):
        calls, start = 0, time.perf_counter()
        while True:  # whole calls until the round is long enough for the clock and jitter
            search()
            calls += 1
            seconds = time.perf_counter() - start
            if seconds >= ROUND_SECONDS:
                break
        rounds.append((calls, seconds))
    return rounds


def timed_search(search: Callable[..., T], *args: Any) -> tuple[T, float]:
    """``search(*args)``'s result and its seconds per call (:data:`SEARCH_TIMING`).

    The fastest round, not the median: another process only ever adds time, so the
    fastest round is the one nearest the search's own cost, and it repeats on a loaded
    machine where a single call or the mean does not. Wall-clock (``perf_counter``), not
    CPU time: ``process_time`` sums every thread's time (BLAS, faiss), so a parallel
    search would read as several times its latency."""
    start = time.perf_counter()
    result = search(*args)
    first = time.perf_counter() - start  # warms caches and BLAS; timed only if too slow
    rounds = repeat_rounds(partial(search, *args), first)
    return result, min((seconds / calls for calls, seconds in rounds), default=first)
