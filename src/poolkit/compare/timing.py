"""Times of a `compare` run: the model time spent inside the encoder's batches, and each
row's search time per call, repeated until it repeats (:func:`timed_search`)."""

from __future__ import annotations

import contextlib
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
    "cache_offset",
    "model_time",
    "repeat_rounds",
    "timed_depths",
    "timed_search",
]

T = TypeVar("T")

ROUNDS = 5  # rounds of repeated searches per row; the fastest is kept
ROUND_SECONDS = 0.02  # a round repeats the search until it took this long
ROW_SECONDS = 0.5  # at most this long repeating one row, so a large corpus stays cheap

SEARCH_TIMING = (
    f"CPU time per call on one thread (BLAS and OpenMP held to one thread), the fastest of "
    f"{ROUNDS} rounds, each round repeating the row's whole search (every query) until it "
    f"took >= {ROUND_SECONDS * 1000:.0f} ms; fewer rounds where they would take over "
    f"{ROW_SECONDS:g} s, and a search slower than that timed once"
)


def cache_offset(encoder: Any) -> Callable[[], float]:
    """What to add to a wall time measured from now on ``encoder`` to make it the model's:
    the forward time recorded with the token states read from its cache
    (:mod:`poolkit.state_cache`) less the time reading them took (0 without a cache)."""
    cache = getattr(encoder, "state_cache", None)
    if cache is None:
        return lambda: 0.0
    c = cache.counts
    recorded, read = c.recorded_seconds, c.read_seconds
    return lambda: (c.recorded_seconds - recorded) - (c.read_seconds - read)


def model_time(encoder: Any, work: Callable[[], T]) -> tuple[T, float]:
    """``work()``'s result and its wall seconds as the model's time on ``encoder``: a part
    read from the token-state cache counts the forward time recorded with it
    (:func:`cache_offset`)."""
    start, offset = time.perf_counter(), cache_offset(encoder)
    result = work()
    return result, time.perf_counter() - start + offset()


class TimedEncoder:
    """Wraps an :class:`~poolkit.encoder.Encoder`; ``seconds`` accumulates the time spent
    producing batches in :meth:`iter_batches` (tokenising and the forward pass, not the
    pooling or scoring done between batches; a batch read from the token-state cache
    counts the forward time recorded with it, :func:`cache_offset`). Everything else is
    delegated."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder
        self.seconds = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.encoder, name)

    def iter_batches(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        batches = self.encoder.iter_batches(*args, **kwargs)
        while True:
            start, offset = time.perf_counter(), cache_offset(self.encoder)
            batch = next(batches, None)
            self.seconds += time.perf_counter() - start + offset()
            if batch is None:
                return
            yield batch


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """BLAS and OpenMP libraries (NumPy's, SciPy's, faiss') run on the calling thread only,
    so that thread's CPU time is the whole of a search's work."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


def repeat_rounds(search: Callable[[], Any], first: float) -> list[tuple[int, float]]:
    """``(calls, seconds)`` of each round of repeated ``search()`` calls, after a first
    call that took ``first`` seconds: :data:`ROUNDS` rounds of at least
    :data:`ROUND_SECONDS` each (wall-clock), as many as fit in :data:`ROW_SECONDS` (none
    for a search that slow); ``seconds`` is the calling thread's CPU time in the round."""
    n_rounds = min(ROUNDS, int(ROW_SECONDS / max(first, ROUND_SECONDS)))
    rounds = []
    for _ in range(n_rounds):
        calls, start, cpu = 0, time.perf_counter(), time.thread_time()
        while True:  # whole calls until the round is long enough for the clock and jitter
            search()
            calls += 1
            if time.perf_counter() - start >= ROUND_SECONDS:
                break
        rounds.append((calls, time.thread_time() - cpu))
    return rounds


def timed_search(search: Callable[..., T], *args: Any) -> tuple[T, float]:
    """``search(*args)``'s result and its seconds per call (:data:`SEARCH_TIMING`).

    The calling thread's CPU time with every library held to that thread: wall-clock time
    on a shared (virtual) machine counts the time the machine was given to others, which
    made the same search read 2-3x apart between runs; CPU time on one thread does not,
    and it is the search's whole cost (a parallel search divides it by the cores it gets).
    The fastest round, not the median: another process only ever adds time (caches it
    evicts), so the fastest round is the one nearest the search's own cost."""
    with one_thread():
        start, cpu = time.perf_counter(), time.thread_time()
        result = search(*args)
        first = time.perf_counter() - start  # warms caches and BLAS; timed only if too slow
        first_cpu = time.thread_time() - cpu
        rounds = repeat_rounds(partial(search, *args), first)
    return result, min((seconds / calls for calls, seconds in rounds), default=first_cpu)


def timed_depths(search: Callable[[int], T], depth: int, deep: int) -> tuple[T, float, float]:
    """``search(k)``'s result at ``max(depth, deep)`` and its seconds per call at ``depth``
    (the row's own search, to its metrics' cut-off) and at that deeper cut (what a hybrid
    that fuses the row searches); one timing where ``deep`` is no deeper or the search takes
    :data:`ROW_SECONDS` or more."""
    top = max(depth, deep)
    result, fused = timed_search(search, top)
    # A search too slow to repeat is scoring every document: the cut changes little.
    own = fused if top == depth or fused >= ROW_SECONDS else timed_search(search, depth)[1]
    return result, own, fused
