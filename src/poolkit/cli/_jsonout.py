"""JSON-lines output to stdout or to a file published atomically."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from poolkit._errors import already_exists
from poolkit.io.atomic import AtomicFile
from poolkit.io.readers import InputError

__all__ = ["json_lines", "rounded"]


def add_output_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """-o, --overwrite, --no-vectors (``what``: what is printed without them), --decimals."""
    parser.add_argument("-o", "--output", default=None,
                        help="JSON-lines file, or - for stdout (default: stdout)")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    parser.add_argument("--no-vectors", action="store_true", help=f"{what} only, no vectors")
    parser.add_argument("--decimals", type=int, default=None, metavar="N",
                        help="round vector values to N decimals (default: float32 as is)")  # fmt: skip


def rounded(vectors: np.ndarray, decimals: int | None) -> list[Any]:
    """``vectors`` as nested lists, rounded to ``decimals`` when given."""
    arr = np.asarray(vectors, dtype=np.float32)
    if decimals is not None:
        arr = np.round(arr.astype(np.float64), decimals)
    return arr.tolist()


@contextmanager
def json_lines(output: str | None, overwrite: bool) -> Iterator[Any]:
    """Yields ``write(obj)``; to stdout, or to ``output`` published whole (fsynced) at the
    end by :class:`poolkit.io.atomic.AtomicFile`."""
    if output in (None, "-"):
        yield lambda obj: sys.stdout.write(json.dumps(obj, ensure_ascii=False) + "\n")
        sys.stdout.flush()
        return
    target = Path(output)
    if target.exists() and not overwrite:
        raise InputError(already_exists(target, fix="--overwrite"))
    if not target.parent.is_dir():
        raise InputError(where=target, expected="an output in an existing directory",
                         got=f"{str(target.parent)!r} does not exist")  # fmt: skip
    out = AtomicFile(target, "w")
    stream = out.file
    try:
        yield lambda obj: stream.write(json.dumps(obj, ensure_ascii=False) + "\n")
    except BaseException:
        out.abort()
        raise
    out.commit()
