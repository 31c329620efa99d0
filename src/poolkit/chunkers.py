"""Chunkers: where a document is cut into chunks, as half-open character spans.

A chunk is a piece of a document, ``text[start:end]``; every chunker returns ``(C, 2)``
int64 spans in document order that slice the user's text exactly (never a prompt, never a
special token). Three kinds, spelled as ``embed_chunks(chunks=...)`` and ``poolkit embed
--chunks`` take them:

==========================  =================================================================
``tokens:SIZE[:OVERLAP]``   at most ``SIZE`` of the model's tokens per chunk, consecutive
                            chunks sharing about ``OVERLAP`` tokens (default 0), cut between
                            words (:func:`token_spans`); never inside a token, nor between
                            two tokens that share a character (a byte-level BPE emoji split
                            in pieces).
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
                numbers = [*map(int, parts), 0]  # OVERLAP defaults to 0
                return cls("tokens", size=numbers[0], overlap=numbers[1])
        value_error("chunks", GRAMMAR, repr(spelling), "For example tokens:128 or tokens:256:32.")

    def __str__(self) -> str:
        if self.kind == "tokens":
            return f"tokens:{self.size}" + (f":{self.overlap}" if self.overlap else "")
        return "sentences" if self.kind == "sentences" else f"column:{self.column}"


def token_spans(
    text: str,
    offsets: np.ndarray,
    size: int,
    overlap: int = 0,
    word_ids: np.ndarray | None = None,
) -> np.ndarray:
    """Chunks of at most ``size`` tokens, consecutive ones sharing about ``overlap``.

    Args:
        text: the document.
        offsets: ``(n, 2)`` int half-open character offsets of its tokens (no special
            tokens), in order.
        size, overlap: tokens per chunk and tokens shared by neighbours (``0 <= overlap <
            size``).
        word_ids: ``(n,)`` int word index of each token (the tokenizer's pre-tokenizer
            words), for the cuts of text without spaces; ``None``: none.

    Returns:
        ``(C, 2)`` int64 character spans: from the first token's start to the last token's
        end, less any whitespace at either edge (a ``▁word`` token's offsets may hold the
        space before it). A chunk takes ``size`` tokens from its start and ends at the
        last cut within them (of the best kind in their second half, else in all); the next
        one starts ``overlap`` tokens before that end, at the first cut from there (else the
        last one before). Cuts, best first: where whitespace separates two tokens (so a
        chunk holds whole words: "dog's" is not cut after its apostrophe); between two of
        the tokenizer's words (text without spaces, such as CJK); between tokens that share
        no character (one word longer than a chunk; never inside a token, nor between the
        byte pieces of one character); else past the run.
        Tokens without characters (empty offsets) are not counted; a chunk of whitespace
        tokens only, or one repeating the last, is dropped.
    """
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    has_text = offsets[:, 1] > offsets[:, 0]
    real = offsets[has_text]
    n = len(real)
    if n == 0:
        return np.zeros((0, 2), np.int64)
    # token_cut[t]: token t shares no character with the tokens before it.
    token_cut = np.ones(n + 1, bool)
    token_cut[1:n] = real[1:, 0] >= np.maximum.accumulate(real[:-1, 1])
    # space_cut[t]: ... and whitespace lies between token t - 1's text and token t's (a gap
    # in the offsets, or a space the offsets of either token hold: "▁word", raw "Ġword").
    gap = real[1:, 0] > real[:-1, 1]
    lead = np.fromiter((text[a].isspace() for a in real[1:, 0].tolist()), bool, n - 1)
    trail = np.fromiter((text[b - 1].isspace() for b in real[:-1, 1].tolist()), bool, n - 1)
    space_cut = token_cut.copy()
    space_cut[1:n] &= gap | lead | trail
    word_cut = space_cut  # ... or starts another of the tokenizer's words
    if word_ids is not None:
        words = np.asarray(word_ids, dtype=np.int64)[has_text]
        word_cut = token_cut.copy()
        word_cut[1:n] &= (words[1:] != words[:-1]) | gap
    levels = (space_cut, word_cut)

    def last_cut(lo: int, hi: int) -> int:
        """The last cut in ``(lo, hi]``: of the best level with one in the chunk's second
        half, else in all of it (an early space does not cut a CJK chunk short), else the
        end of the unsplittable run from ``lo``."""
        half = lo + max(1, (hi - lo) // 2)
        for first, cuts in [(half, c) for c in levels] + [
            (lo + 1, c) for c in (*levels, token_cut)
        ]:
            hits = np.flatnonzero(cuts[first : hi + 1])
            if hits.size:
                return first + int(hits[-1])
        return lo + 1 + int(np.flatnonzero(token_cut[lo + 1 :])[0])

    def next_start(nxt: int, start: int, end: int) -> int:
        """Where the chunk after ``[start, end)`` starts, ``nxt`` asked: of the best level
        of cuts that has one, the first in ``[nxt, end]``, else the last in ``(start,
        nxt)`` (a little more overlap rather than half a word); else the first token cut
        in ``[nxt, end]``."""
        for cuts in levels:
            ahead = np.flatnonzero(cuts[nxt : end + 1])
            if ahead.size:
                return nxt + int(ahead[0])
            behind = np.flatnonzero(cuts[start + 1 : nxt])
            if behind.size:
                return start + 1 + int(behind[-1])
        return nxt + int(np.flatnonzero(token_cut[nxt : end + 1])[0])

    spans: list[tuple[int, int]] = []
    start = 0
    while True:
        end = n if start + size >= n else last_cut(start, start + size)
        trimmed = _strip(text, int(real[start, 0]), int(real[start:end, 1].max()))
        if trimmed[1] > trimmed[0] and (not spans or spans[-1] != trimmed):
            spans.append(trimmed)
        if end >= n:
            break
        start = next_start(max(end - overlap, start + 1), start, end)
    return np.asarray(spans, dtype=np.int64).reshape(-1, 2)


# Sentence ends, as the docstring of sentence_spans words them.
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
    out = []
    begin = 0
    for end in [m.end() for m in _END.finditer(text)] + [len(text)]:
        a, b = _strip(text, begin, end)
        if b > a:
            out.append((a, b))
        begin = end
    return np.asarray(out, dtype=np.int64).reshape(-1, 2)


def _strip(text: str, a: int, b: int) -> tuple[int, int]:
    """``(a, b)`` less whitespace at either edge of ``text[a:b]`` (``b <= a``: nothing else)."""
    piece = text[a:b]
    return a + len(piece) - len(piece.lstrip()), b - len(piece) + len(piece.rstrip())


def check_spans(text: str, spans: Any, arg: str, index: tuple[int, ...] = ()) -> np.ndarray:
    """The user's chunk spans of one document as ``(C, 2)`` int64, checked.

    Each ``(start, end)`` must satisfy ``0 <= start < end <= len(text)`` and cover more
    than whitespace; spans must come in order without overlapping (chunks of a document
    are disjoint pieces; overlapping windows are ``tokens:SIZE:OVERLAP``). ``arg`` and
    ``index`` name the document in errors (``"chunks"``, ``(3,)``: ``chunks[3]``).
    """
    if not isinstance(spans, Sequence | np.ndarray) or isinstance(spans, str):
        type_error(arg, "a list of (start, end) pairs", type(spans).__name__, index=index or None)
    try:
        arr = np.asarray(spans)
    except ValueError:
        arr = np.asarray([], dtype=object)
    if arr.size == 0 and len(spans) == 0:
        value_error(arg, "at least one (start, end) span", "none",
                    "Give every document one chunk at least, e.g. [(0, len(text))].",
                    index=index or None)  # fmt: skip
    if arr.ndim != 2 or arr.shape[1] != 2 or not np.issubdtype(arr.dtype, np.integer):
        type_error(arg, "a list of (start, end) pairs of ints", f"{spans!r:.60}",
                   index=index or None)  # fmt: skip
    arr = arr.astype(np.int64)
    for k, (a, b) in enumerate(arr.tolist()):
        if not 0 <= a < b <= len(text):
            value_error(arg, f"(start, end) with 0 <= start < end <= len(text) = {len(text)}",
                        f"({a}, {b})", "Spans are half-open character offsets, like "
                        "text[start:end].", index=(*index, k))  # fmt: skip
        if not text[a:b].strip():
            value_error(arg, "a span with some text", f"({a}, {b}), whitespace only",
                        index=(*index, k))  # fmt: skip
        if k and a < arr[k - 1, 1]:
            p, q = arr[k - 1].tolist()
            value_error(arg, f"a span starting at or after the previous one's end ({q})",
                        f"({a}, {b}) after ({p}, {q})",
                        "Chunk spans come in order and do not overlap; for overlapping "
                        "windows use tokens:SIZE:OVERLAP.", index=(*index, k))  # fmt: skip
    return arr
