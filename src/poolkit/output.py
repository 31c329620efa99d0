"""The output stage of a recipe: keep the first ``k`` dimensions, then store each vector at
a precision. Pure functions on NumPy arrays; :class:`Calibration` carries int8/uint8 ranges.

=============  ==========  ======================  ==================================
precision      dtype       bytes per vector        value
=============  ==========  ======================  ==================================
``float32``    float32     ``4 k``                 the vector
``float16``    float16     ``2 k``                 the vector, rounded to half
``int8``       int8        ``k``                   ``floor((v - start) / step) - 128``
``uint8``      uint8       ``k``                   ``floor((v - start) / step)``
``binary``     int8        ``ceil(k / 8)``         sign bits (``v > 0``), 8 per byte
                                                   (first dimension = high bit), minus 128
``ubinary``    uint8       ``ceil(k / 8)``         the same bytes, not offset
=============  ==========  ======================  ==================================

Per dimension, ``start`` is the least calibration value and ``step`` the range over 255
(the layout sentence-transformers' ``quantize_embeddings`` gives, value for value).
Values outside the calibration range are clipped to the ends (0..255 before the offset);
a dimension whose calibration values are all equal counts in steps of 1. A
width that is not a multiple of 8 pads each row's last byte with zero bits.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from poolkit._errors import value_error
from poolkit._version import __version__

__all__ = [
    "PRECISIONS",
    "Calibration",
    "bytes_per_vector",
    "hamming_distances",
    "needs_calibration",
    "quantize",
    "stage_record",
    "stored_dtype",
    "truncate",
    "unpack_bits",
]

PRECISIONS = ("float32", "float16", "int8", "uint8", "binary", "ubinary")
_DTYPES = {"float32": np.float32, "float16": np.float16, "int8": np.int8, "uint8": np.uint8,
           "binary": np.int8, "ubinary": np.uint8}  # fmt: skip
CALIBRATION_JSON_VERSION = 1


def stage_record(
    recipes: Mapping[str, Any],
    dims: Mapping[str, int],
    ranges: Mapping[str, Calibration],
    fits: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """What each column of a job whose recipes have an output stage is, as written with the
    vectors (a Parquet file's ``poolkit`` metadata, the JSON beside ``.npy``/``.jsonl``):
    its recipe, dimensions kept (``dims``), precision, stored dtype and width, bytes,
    int8/uint8 ``ranges`` and the fitted transform's fit (``fits``: what it was fitted on and
    its digest). None when no recipe has an output stage."""
    if not any(r.has_output_stage for r in recipes.values()):
        return None
    columns = {}
    for name, r in recipes.items():
        k = dims[name]
        columns[name] = {
            "recipe": str(r),
            "recipe_json": r.to_json(),
            "dims": k,
            "precision": r.precision or "float32",
            "stored_dtype": stored_dtype(r.precision).name,
            "stored_width": stored_width(k, r.precision),
            "bytes_per_vector": bytes_per_vector(k, r.precision),
            "bits": "packed 8 per byte, first dimension in the high bit; binary: byte - 128"
            if r.precision in ("binary", "ubinary")
            else None,
            "calibration": ranges[name].to_json() if name in ranges else None,
        }
        if fits and name in fits:
            fit = fits[name]
            columns[name]["fit"] = {"recipe": fit.recipe, "digest": fit.digest(),
                                    "texts": fit.texts, "source": fit.source}  # fmt: skip
    return {"poolkit": __version__, "columns": columns}


def needs_calibration(precision: str | None) -> bool:
    """Whether ``precision`` stores values against per-dimension ranges (int8, uint8)."""
    return precision in ("int8", "uint8")


def stored_dtype(precision: str | None) -> np.dtype[Any]:
    """The NumPy dtype vectors of ``precision`` are stored as (``None``: float32)."""
    return np.dtype(_DTYPES[precision or "float32"])


def bytes_per_vector(dims: int, precision: str | None) -> int:
    """Bytes one stored vector of ``dims`` dimensions takes at ``precision``."""
    return stored_width(dims, precision) * stored_dtype(precision).itemsize


def stored_width(dims: int, precision: str | None) -> int:
    """Columns of the stored array: ``dims``, or its byte count for packed bits."""
    return (dims + 7) // 8 if precision in ("binary", "ubinary") else dims


def l2_normalize(x: Any) -> Any:
    """Rows of ``(..., D)`` scaled to unit L2 norm (zero rows stay zero): float32 NumPy, or
    a torch tensor where it lives, in its dtype."""
    if hasattr(x, "detach"):
        return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return (x / np.maximum(norm, 1e-12)).astype(np.float32, copy=False)


def truncate(vectors: Any, dims: int | None, *, normalize: bool) -> Any:
    """The first ``dims`` columns of float ``(N, D)`` ``vectors`` (all of them for
    ``None``), L2-normalised again when ``normalize`` (a Matryoshka model's vectors).
    NumPy in, float32 NumPy out; a torch tensor stays one (its device, dtype and graph)."""
    if not hasattr(vectors, "detach"):
        vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2:
        value_error("vectors", "a 2-D array (N, D)", f"shape {tuple(vectors.shape)}")
    if dims is None or dims == vectors.shape[1]:
        return vectors
    if not 1 <= dims <= vectors.shape[1]:
        value_error("dims", f"between 1 and the vectors' width {vectors.shape[1]}", dims)
    out = vectors[:, :dims]
    if isinstance(out, np.ndarray):
        out = np.ascontiguousarray(out)
    return l2_normalize(out) if normalize else out


@dataclass(frozen=True, eq=False)
class Calibration:
    """Per-dimension ranges for int8/uint8: ``starts`` (least values) and ``steps`` (range
    over 255), float32 ``(D,)`` each; ``source`` says where they came from.

    Build it with :meth:`from_vectors` (calibration vectors, as sentence-transformers'
    ``calibration_embeddings``) or :meth:`from_ranges` (a ``(2, D)`` min/max array, its
    ``ranges``); :meth:`to_json`/:meth:`from_json` keep it beside stored vectors, so that
    queries are quantised with the corpus' ranges.
    """

    starts: np.ndarray
    steps: np.ndarray
    source: str = ""

    @classmethod
    def from_vectors(cls, vectors: Any, source: str = "calibration vectors") -> Calibration:
        """Ranges from float ``(N, D)`` calibration vectors: min and max per dimension."""
        v = np.asarray(vectors)
        if v.ndim != 2 or v.shape[0] < 1 or v.dtype.kind != "f":
            value_error("calibration", "float calibration vectors of shape (N, D), N >= 1",
                        f"{v.dtype} of shape {v.shape}")  # fmt: skip
        return cls.from_ranges(np.vstack((v.min(axis=0), v.max(axis=0))), source)

    @classmethod
    def from_ranges(cls, ranges: Any, source: str = "ranges") -> Calibration:
        """From a ``(2, D)`` array: row 0 the least value, row 1 the greatest, per dimension."""
        r = np.asarray(ranges)
        if r.ndim != 2 or r.shape[0] != 2 or r.dtype.kind not in "fiu":
            value_error("calibration", "ranges of shape (2, D) (min row, max row)",
                        f"{r.dtype} of shape {r.shape}")  # fmt: skip
        if not np.isfinite(r).all():
            value_error("calibration", "finite ranges", "NaN or infinite values")
        starts = r[0]
        steps = (r[1] - r[0]) / 255
        return cls(np.asarray(starts), np.asarray(steps), source)

    @property
    def dims(self) -> int:
        return int(self.starts.shape[0])

    @property
    def ranges(self) -> np.ndarray:
        """``(2, D)``: the least and the greatest value per dimension."""
        return np.vstack((self.starts, self.starts + self.steps * 255))

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: starts and steps as lists of float32 values (exact round trip)."""
        return {
            "version": CALIBRATION_JSON_VERSION,
            "dims": self.dims,
            "starts": np.asarray(self.starts, np.float32).tolist(),
            "steps": np.asarray(self.steps, np.float32).tolist(),
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str) -> Calibration:
        """The calibration of a :meth:`to_json` dict (or its JSON text)."""
        if isinstance(data, str):
            try:
                data = json.loads(data)
            except ValueError:
                value_error("calibration", "calibration JSON", f"{data[:40]!r}")
        if not isinstance(data, Mapping) or data.get("version") != CALIBRATION_JSON_VERSION:
            value_error("calibration", f"calibration JSON of version {CALIBRATION_JSON_VERSION}",
                        f"{str(data)[:60]!r}")  # fmt: skip
        starts = np.asarray(data.get("starts", []), np.float32)
        steps = np.asarray(data.get("steps", []), np.float32)
        if starts.ndim != 1 or starts.shape != steps.shape or not starts.size:
            value_error("calibration", "starts and steps lists of one length",
                        f"{starts.shape} and {steps.shape}")  # fmt: skip
        return cls(starts, steps, str(data.get("source", "")))

    def digest(self) -> str:
        """SHA-256 of the float32 starts and steps: equal ranges, equal digest."""
        h = hashlib.sha256(np.asarray(self.starts, np.float32).tobytes())
        h.update(np.asarray(self.steps, np.float32).tobytes())
        return h.hexdigest()

    def __repr__(self) -> str:
        return f"Calibration(dims={self.dims}, source={self.source!r}, sha256={self.digest()[:12]})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Calibration) and self.digest() == other.digest()

    def __hash__(self) -> int:
        return hash(self.digest())


def quantize(
    vectors: np.ndarray, precision: str | None, calibration: Calibration | None = None
) -> np.ndarray:
    """Float ``(N, D)`` vectors in their stored form at ``precision`` (see the module
    docstring). int8/uint8 need ``calibration`` with ``D`` ranges."""
    p = precision or "float32"
    if p not in PRECISIONS:
        value_error("precision", f"one of {', '.join(PRECISIONS)}", repr(precision))
    v = np.asarray(vectors)
    if v.ndim != 2 or v.dtype.kind != "f":
        value_error("vectors", "float vectors of shape (N, D)", f"{v.dtype} of shape {v.shape}")
    if p == "float32":
        return v.astype(np.float32, copy=False)
    if p == "float16":
        return v.astype(np.float16)
    if p in ("binary", "ubinary"):
        packed = np.packbits(v > 0, axis=1)  # uint8 (N, ceil(D/8)), first dimension high bit
        # Offset by 128 into int8: the byte b becomes b - 128 (the same bits, top one flipped).
        return (packed ^ np.uint8(0x80)).view(np.int8) if p == "binary" else packed
    if calibration is None:
        value_error("calibration", f"ranges for precision {p}", "None",
                     "Pass calibration= (calibration vectors, texts, or a Calibration from "
                     "an earlier call's stats), as queries need the corpus' ranges.")  # fmt: skip
    if calibration.dims != v.shape[1]:
        value_error("calibration", f"ranges for {v.shape[1]} dimensions",
                    f"ranges for {calibration.dims}",
                    "Calibrate with vectors of the recipe's width (after truncation).")  # fmt: skip
    starts = np.asarray(calibration.starts, np.float32)
    steps = np.asarray(calibration.steps, np.float32)
    steps = np.where(steps > 0, steps, np.float32(1))  # a constant dimension: unit buckets
    # Bucket index: floor of the distance from the start in steps, kept within 0..255
    # (values outside the calibration range go to the end buckets).
    codes = np.clip(np.floor((v - starts) / steps), 0, 255)
    if p == "uint8":
        return codes.astype(np.uint8)
    return (codes - 128).astype(np.int8)


def unpack_bits(stored: np.ndarray, dims: int) -> np.ndarray:
    """Bits of binary/ubinary ``stored`` rows as uint8 0/1 ``(N, dims)``."""
    raw = np.asarray(stored)
    if raw.dtype == np.int8:
        raw = raw.view(np.uint8) ^ np.uint8(0x80)
    return np.unpackbits(raw, axis=1, count=dims)


def hamming_distances(queries: np.ndarray, docs: np.ndarray, dims: int) -> np.ndarray:
    """Exact Hamming distances ``(Q, N)`` between stored binary/ubinary rows.

    Computed as ``(dims - s_q . s_d) / 2`` on the ±1 sign vectors with one BLAS matrix
    product (exact: integers well inside float32's range)."""
    q = unpack_bits(queries, dims).astype(np.float32) * 2 - 1
    d = unpack_bits(docs, dims).astype(np.float32) * 2 - 1
    return np.rint((dims - q @ d.T) / 2).astype(np.int32)
