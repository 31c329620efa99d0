"""Repair notices from the library as one ``poolkit: warning:`` line each on stderr.

The library reports a damaged cache entry or checkpoint part that it rebuilds with an
:class:`~poolkit.io.integrity.IntegrityWarning`; Python's default display takes two
lines and a source excerpt, which is noise for a command-line user. Other warnings keep
the default display.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from poolkit._errors import markup
from poolkit.cli._flags import flag_for
from poolkit.io.integrity import IntegrityWarning

__all__ = ["one_line_warnings"]


@contextmanager
def one_line_warnings() -> Iterator[None]:
    """Show every :class:`IntegrityWarning` (none deduplicated) as one line."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", IntegrityWarning)
        default = warnings.showwarning

        def show(message: Any, category: type, *args: Any, **kwargs: Any) -> None:
            if issubclass(category, IntegrityWarning):
                text = markup(" ".join(str(message).split()), flag_for)
                print(f"poolkit: warning: {text}", file=sys.stderr)
            else:
                default(message, category, *args, **kwargs)

        warnings.showwarning = show
        yield
