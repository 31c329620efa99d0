"""Silence transformers while poolkit loads a model: its weight-loading bar and its
info/warning logs are not for poolkit's users (poolkit draws its own progress). Errors
still show, and exceptions pass through unchanged."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["quiet_loading"]


@contextmanager
def quiet_loading() -> Iterator[None]:
    """Within the block: no transformers progress bars, transformers logs at ERROR only;
    both restored afterwards."""
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    level = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)
        if bar:
            hf_logging.enable_progress_bar()
