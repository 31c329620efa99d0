"""Model time of a `compare` run: the time spent inside the encoder's batches."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

__all__ = ["TimedEncoder"]


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
