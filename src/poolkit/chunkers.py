"""Chunkers: where a document is cut into chunks, as half-open character spans.

A chunk is a piece of a document, ``text[start:end]``; every chunker returns ``(C, 2)``
int64 spans in document order that slice the user's text exactly (never a prompt, never a
special token). Three kinds, spelled as ``embed_chunks(chunks=...)`` and ``poolkit embed
--chunks`` take them:

==========================  =================================================================
``tokens:SIZE[:OVERLAP]``   ``SIZE`` of the model's tokens per chunk, consecutive chunks
                            sharing ``OVERLAP`` tokens (default 0); the last chunk holds the
                            rest. A cut never falls inside a token, nor between two tokens
                            that share a character (a byte-level BPE emoji split in pieces).
``sentences``               the rule of :func:`sentence_spans`: no model, no download.
``column:NAME``             the user's spans (``poolkit embed``: a field of the input; the
                            library takes the lists themselves): in the text, not empty, in
                            order and not overlapping.
==========================  =================================================================
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from poolkit._errors import type_error, value_error

__all__ = ["Chunker", "check_spans", "sentence_spans", "token_spans"]

KINDS = ("tokens", "sentences", "column")
GRAMMAR = "tokens:SIZE[:OVERLAP], sentences or column:NAME"


@dataclass(frozen=True)
class Chunker:
    """How to cut documents: ``kind`` with its ``size``/``overlap`` (tokens) or ``column``.

    ``str(chunker)`` is its spelling, which :meth:`parse` reads back.
    """

    kind: str
    size: int | None = None
    overlap: int = 0
    column: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            value_error("chunks", GRAMMAR, repr(self.kind))
        if self.kind == "tokens":
            size, overlap = self.size, self.overlap
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                value_error("chunks", "tokens:SIZE with SIZE >= 1", f"tokens:{size}")
            if not isinstance(overlap, int) or not 0 <= overlap < size:
                value_error("chunks", f"an OVERLAP from 0 to SIZE - 1 = {size - 1}",
                            f"tokens:{size}:{overlap}",
                            "Consecutive chunks share OVERLAP tokens: it must be below SIZE.")  # fmt: skip
        elif self.kind == "column" and not self.column:
            value_error("chunks", "column:NAME with the field that holds the spans", "column:")

    @classmethod
    def parse(cls, spelling: Chunker | str) -> Chunker:
        """``"tokens:128"``, ``"tokens:128:32"``, ``"sentences"`` or ``"column:spans"``."""
        if isinstance(spelling, Chunker):
            return spelling
        if not isinstance(spelling, str):
            type_error("chunks", f"a chunker ({GRAMMAR}) or per-document spans",
                       type(spelling).__name__)  # fmt: skip
        kind, _, rest = spelling.strip().partition(":")
        if kind == "sentences" and not rest:
            return cls("sentences")
        if kind == "column":
            return cls("column", column=rest)
        if kind == "tokens":
            parts = rest.split(":")
            if 1 <= len(parts) <= 2 and all(p.strip().isdigit() for p in parts):
                numbers = [int(p) for p in parts]
                return cls("tokens", size=numbers[0], overlap=numbers[1] if len(parts) > 1 else 0)
        value_error("chunks", GRAMMAR, repr(spelling), "For example tokens:128 or tokens:256:32.")

    def __str__(self) -> str:
        if self.kind == "tokens":
            return f"tokens:{self.size}" + (f":{self.overlap}" if self.overlap else "")
        return "sentences" if self.kind == "sentences" else f"column:{self.column}"


def token_spans(text: str, offsets: np.ndarray, size: int, overlap: int = 0) -> np.ndarray:
    """Chunks of ``size`` tokens, consecutive ones sharing ``overlap``.

    Args:
        text: the document.
        offsets: ``(n, 2)`` int half-open character offsets of its tokens (no special
            tokens), in order.
        size, overlap: tokens per chunk and tokens shared by neighbours (``0 <= overlap <
            size``).

    Returns:
        ``(C, 2)`` int64 character spans: from the first token's start to the last token's
        end, less any whitespace at either edge (a ``▁word`` token's offsets may hold the
        space before it). A chunk starts at token ``k * (size - overlap)`` and the last one
        holds the rest; a cut that would separate two tokens sharing a character moves back
        to the start of the first of them, so no character is split (a chunk may then hold
        fewer tokens). Tokens without characters (empty offsets) are not counted; a chunk
        of whitespace tokens only is dropped.
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    real = offsets[offsets[:, 1] > offsets[:, 0]]
    n = len(real)
    if n == 0:
        return np.zeros((0, 2), np.int64)
    # cut_ok[t]: a chunk may start at token t (it shares no character with token t - 1).
    cut_ok = np.ones(n, bool)
    cut_ok[1:] = real[1:, 0] >= np.maximum.accumulate(real[:-1, 1])
    spans = []
    start = 0
    while True:
        end = min(start + size, n)  # exclusive token index
        while end < n and not cut_ok[end] and end > start + 1:
            end -= 1
        while end < n and not cut_ok[end]:  # one unsplittable run longer than the chunk
            end += 1
        a, b = int(real[start, 0]), int(real[start:end, 1].max())
        piece = text[a:b]
        trimmed = (a + len(piece) - len(piece.lstrip()), b - len(piece) + len(piece.rstrip()))
        if piece.strip() and (not spans or spans[-1] != trimmed):  # a repeat says nothing new
            spans.append(trimmed)
        if end >= n:
            break
        nxt = max(end - overlap, start + 1)
        while nxt < end and not cut_ok[nxt]:
            nxt += 1
        start = nxt
    return np.asarray(spans, dtype=np.int64).reshape(-1, 2)


# A sentence ends at . ! ? or … (runs of them), with any closing quotes or brackets, before
# whitespace or the end of the text; at the CJK full stops 。！？ (and their closers) with
# or without space; and at a blank line (paragraph break).
_END = re.compile(
    r"""[.!?…]+["'”’)\]»]*(?=\s|$)"""
    r"""|[。！？]+[」』”’）】]*"""
    r"""|(?=\n[ \t]*\n)"""
)


def sentence_spans(text: str) -> np.ndarray:
    """The sentences of ``text`` as ``(C, 2)`` int64 spans, surrounding whitespace left out.

    The rule (no model, no download): a sentence ends after a run of ``.``, ``!``, ``?``
    or ``…`` with any closing quotes or brackets, where whitespace or the end of the text
    follows; after the CJK marks ``。！？`` (no space needed); and before a blank line.
    Abbreviations ("Dr. No") therefore end a sentence. Text after the last mark is one
    more sentence; a text of whitespace only has none.
    """
    spans = []
    begin = 0
    for m in _END.finditer(text):
        spans.append((begin, m.end()))
        begin = m.end()
    spans.append((begin, len(text)))
    out = []
    for a, b in spans:
        piece = text[a:b]
        lead = len(piece) - len(piece.lstrip())
        trail = len(piece) - len(piece.rstrip())
        if b - trail > a + lead:
            out.append((a + lead, b - trail))
    return np.asarray(out, dtype=np.int64).reshape(-1, 2)


def check_spans(text: str, spans: Any, arg: str) -> np.ndarray:
    """The user's chunk spans of one document as ``(C, 2)`` int64, checked.

    Each ``(start, end)`` must satisfy ``0 <= start < end <= len(text)`` and cover more
    than whitespace; spans must come in order without overlapping (chunks of a document
    are disjoint pieces; overlapping windows are ``tokens:SIZE:OVERLAP``). ``arg`` names
    the document in messages (``"chunks[3]"``).
    """
    if not isinstance(spans, Sequence | np.ndarray) or isinstance(spans, str):
        type_error(arg, "a list of (start, end) pairs", type(spans).__name__)
    try:
        arr = np.asarray(spans)
    except ValueError:
        arr = np.asarray([], dtype=object)
    if arr.size == 0 and len(spans) == 0:
        value_error(arg, "at least one (start, end) span", "none",
                    "Give every document one chunk at least, e.g. [(0, len(text))].")  # fmt: skip
    if arr.ndim != 2 or arr.shape[1] != 2 or not np.issubdtype(arr.dtype, np.integer):
        type_error(arg, "a list of (start, end) pairs of ints", f"{spans!r:.60}")
    arr = arr.astype(np.int64)
    for k, (a, b) in enumerate(arr.tolist()):
        if not 0 <= a < b <= len(text):
            value_error(f"{arg}[{k}]",
                        f"(start, end) with 0 <= start < end <= len(text) = {len(text)}",
                        f"({a}, {b})", "Spans are half-open character offsets, like text[start:end].")  # fmt: skip
        if not text[a:b].strip():
            value_error(f"{arg}[{k}]", "a span with some text", f"({a}, {b}), whitespace only")
        if k and a < arr[k - 1, 1]:
            p, q = arr[k - 1].tolist()
            value_error(f"{arg}[{k}]", f"a span starting at or after the previous one's end ({q})",
                        f"({a}, {b}) after ({p}, {q})",
                        "Chunk spans come in order and do not overlap; for overlapping "
                        "windows use tokens:SIZE:OVERLAP.")  # fmt: skip
    return arr
