"""Text in, arrays out: ``embed``, ``embed_tokens``, ``embed_words``, ``embed_spans``.

Every function runs :class:`poolkit.Encoder` batches and pools them with the core
functions (``sequence_embedding``, ``token_embeddings``, ``word_embeddings``,
``span_embeddings``, ``layer_mix``); nothing here pools on its own.

Character spans (``embed_spans``) are half-open ``[start, end)`` like Python slices;
they become *inclusive* token spans ``[first, last]`` here, and only here.

Texts longer than the model's max length are truncated and counted: a
:class:`TruncationWarning` names how many, and :class:`EmbedStats` carries the indices.
``long_text="chunk"`` embeds overlapping windows instead and pools over all tokens.
"""

from __future__ import annotations

import os
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poolkit.encoder import EncodedBatch, Encoder, LongText, check_batch_tokens, check_texts
from poolkit.sequence import parse_sequence_strategy, sequence_embedding

__all__ = [
    "EmbedStats",
    "TokenVectors",
    "TruncationWarning",
    "embed",
    "embed_spans",
    "embed_tokens",
    "embed_words",
    "get_encoder",
]

ModelRef = str | os.PathLike[str] | Encoder | None
Layers = str | int | Sequence[int] | None


class TruncationWarning(UserWarning):
    """Some texts were longer than the model's max length and were cut."""


@dataclass
class EmbedStats:
    """What one call did.

    Attributes:
        num_texts: texts embedded.
        num_tokens: real tokens fed to the model, specials included, after truncation.
        truncated: indices (into the input) of texts cut at ``max_length``.
        max_length: the max length used.
        seconds: wall time of the call (tokenization, forward, pooling).
        dims: output width per strategy name.
    """

    num_texts: int = 0
    num_tokens: int = 0
    truncated: list[int] = field(default_factory=list)
    max_length: int = 0
    seconds: float = 0.0
    dims: dict[str, int] = field(default_factory=dict)

    @property
    def num_truncated(self) -> int:
        return len(self.truncated)


@dataclass(frozen=True)
class TokenVectors:
    """Tokens of one text with their vectors (special tokens removed).

    Attributes:
        tokens: ``n`` token strings.
        offsets: ``(n, 2)`` int64 half-open character offsets ``[start, end)`` into the text.
        vectors: ``(n, H)`` float32.
    """

    tokens: list[str]
    offsets: np.ndarray
    vectors: np.ndarray


_CACHE: OrderedDict[tuple[Any, ...], Encoder] = OrderedDict()
_CACHE_SIZE = 2


def get_encoder(
    model: ModelRef = None,
    *,
    device: str = "auto",
    dtype: Any = None,
    max_length: int | None = None,
    backend: str = "torch",
    quantize: str | None = None,
) -> Encoder:
    """The :class:`Encoder` for these settings, loaded once and cached (two most recent).

    An :class:`Encoder` passed as ``model`` is returned as it is. ``backend`` and
    ``quantize`` are passed to :class:`Encoder` (``"onnx"``, ``"int8"``).
    """
    if isinstance(model, Encoder):
        if max_length is not None and max_length != model.max_length:
            raise ValueError(
                f"Expected `max_length` to be None when `model` is an Encoder (it has "
                f"max_length={model.max_length}), but got {max_length}. Build the Encoder "
                "with the max_length you want."
            )
        return model
    key = (
        None if model is None else os.fspath(model),
        device,
        str(dtype),
        max_length,
        backend,
        quantize,
    )
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    encoder = Encoder(model, device=device, dtype=dtype, max_length=max_length, backend=backend,
                      quantize=quantize)  # fmt: skip
    _CACHE[key] = encoder
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return encoder


def sequence_strategy_names(strategy: str | Sequence[str] | None) -> list[str] | None:
    """``strategy`` as a list of validated sequence strategy names (``None`` stays ``None``).

    Raises:
        TypeError: ``strategy`` is neither a name nor a sequence of names.
        ValueError: an unknown name, an empty list, a non-string item or a repeated name.
    """
    if strategy is None:
        return None
    if isinstance(strategy, str):
        parse_sequence_strategy(strategy)
        return [strategy]
    if not isinstance(strategy, Sequence):
        raise TypeError(
            f"Expected `strategy` to be a name or a list of names, but got "
            f"{type(strategy).__name__} ({strategy!r:.40})."
        )
    names = list(strategy)
    if not names or not all(isinstance(s, str) for s in names):
        raise ValueError(
            f"Expected `strategy` to be a name or a non-empty list of names, but got {strategy!r}."
        )
    for name in names:
        parse_sequence_strategy(name)
    if len(set(names)) != len(names):
        raise ValueError(f"Expected `strategy` to list each name once, but got {names}.")
    return names


def _unicode(value: str, arg: str) -> None:
    # A lone surrogate (e.g. from a JSON "\\ud800" escape) is not text; tokenizers choke on it.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"Expected `{arg}` to be text, but it holds an unpaired surrogate "
            f"(\\u{ord(value[e.start]):04x}) at character {e.start}. Remove or replace it."
        ) from None


def _check_inputs(texts: Any, words: bool = False) -> list[Any]:
    """``texts`` (or ``words``) as a list, with types and Unicode checked up front."""
    if words and (isinstance(texts, str) or not isinstance(texts, Iterable)):
        raise TypeError(
            f"Expected `words` to be a list of word lists (one per text), but got "
            f"{type(texts).__name__}."
        )
    items = check_texts(texts, words)
    for i, item in enumerate(items):
        if words:
            for j, word in enumerate(item):
                _unicode(word, f"words[{i}][{j}]")
        else:
            _unicode(item, f"texts[{i}]")
    return items


def _hidden(batch: EncodedBatch, layers: Layers, how: str) -> Any:
    if layers is None:
        return batch.hidden
    from poolkit.layers import layer_mix

    return layer_mix(batch.hidden_states, layers, how)


def to_float32_numpy(x: Any) -> np.ndarray:
    """A pooled result as a float32 NumPy array of the same shape.

    ``x`` is a torch tensor (any device and float dtype; copied to the host) or anything
    ``np.asarray`` takes (no copy when it already is float32 NumPy).
    """
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)


def _l2(x: Any) -> Any:
    if hasattr(x, "detach"):
        import torch

        return torch.nn.functional.normalize(x.float(), p=2.0, dim=-1, eps=1e-12)
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.maximum(norm, 1e-12)


def _warn_truncated(stats: EmbedStats, what: str = "texts") -> None:
    if stats.truncated:
        shown = ", ".join(str(i) for i in stats.truncated[:5])
        more = ", ..." if stats.num_truncated > 5 else ""
        warnings.warn(
            f"{stats.num_truncated} of {stats.num_texts} {what} were longer than "
            f"{stats.max_length} tokens and were truncated (indices {shown}{more}). Pass "
            "long_text='chunk' to embed all of their tokens.",
            TruncationWarning,
            stacklevel=3,
        )


def _check_empty_rows(batch: EncodedBatch) -> None:
    real = (batch.attention_mask != 0) & ~batch.special_tokens_mask
    empty = np.flatnonzero(~real.any(axis=1))
    if empty.size:
        rows = ", ".join(str(int(batch.indices[j])) for j in empty[:5])
        raise ValueError(
            f"Expected every text to have at least one non-special token with "
            f"`exclude_special=True`, but texts {rows} have none (empty strings?). "
            "Remove them or pass exclude_special=False."
        )


def embed(
    texts: Sequence[str],
    model: ModelRef = None,
    strategy: str | Sequence[str] | None = None,
    *,
    normalize: bool | None = None,
    layers: Layers = None,
    layer_how: str = "mean",
    exclude_special: bool = False,
    long_text: LongText = "truncate",
    max_length: int | None = None,
    max_batch_tokens: int | None = None,
    device: str = "auto",
    dtype: Any = None,
    return_stats: bool = False,
    progress: Callable[[int], None] | None = None,
) -> Any:
    """Embed texts, one vector each, with the model's intended pooling by default.

    Args:
        texts: ``N`` strings.
        model: model directory, hub id, or an :class:`Encoder`; ``None`` for the default
            ``sentence-transformers/all-MiniLM-L6-v2``. Encoders are cached, so repeated calls do not reload.
        strategy: ``None`` for the model's intended pooling (:attr:`ModelInfo.pooling`);
            a name such as ``"cls"`` or ``"cls+mean"`` (concatenation); or a list of
            names, computed from one forward pass and returned as a dict.
        normalize: L2-normalise each vector; ``None`` follows the model (its
            ``Normalize`` module), whatever the strategy.
        layers: ``None`` for the last layer, else passed to ``layer_mix``
            (``"last4"``, ``"first_last"``, an int or a list of ints) with ``layer_how``.
        exclude_special: pool without [CLS]/[SEP]-like tokens (not for ``cls``).
        long_text: ``"truncate"`` (counted; warns with :class:`TruncationWarning`) or
            ``"chunk"`` (overlapping windows, pooled over all of a text's tokens).
        max_length: tokens per sequence, specials included; default the model's.
        max_batch_tokens: token budget per forward batch; default the Encoder's (2048 on CPU).
        device, dtype: for loading the model (see :class:`Encoder`).
        return_stats: also return an :class:`EmbedStats`.
        progress: called with the number of texts finished after each batch.

    Returns:
        float32 NumPy ``(N, D)`` in input order, or for a list of strategies a dict
        name -> ``(N, D_name)``; with ``return_stats=True`` a pair ``(result, stats)``.
        ``N = 0`` gives ``(0, D)`` arrays. Padding never changes a row's value.
    """
    start = time.perf_counter()
    texts = _check_inputs(texts)
    check_batch_tokens(max_batch_tokens)  # before the model loads
    names = sequence_strategy_names(strategy)
    as_dict = names is not None and not isinstance(strategy, str)
    encoder = get_encoder(model, device=device, dtype=dtype, max_length=max_length)
    if names is None:
        names = [encoder.info.pooling]
    if normalize is None:
        normalize = encoder.info.normalize
    stats = EmbedStats(max_length=encoder.max_length)
    out: dict[str, np.ndarray] = {}
    n = len(texts)
    for batch in encoder.iter_batches(
        texts,
        all_layers=layers is not None,
        long_text=long_text,
        max_batch_tokens=max_batch_tokens,
    ):
        if exclude_special:
            _check_empty_rows(batch)
        hidden = _hidden(batch, layers, layer_how)
        for name in names:
            vec = sequence_embedding(
                hidden,
                batch.attention_mask,
                name,
                special_tokens_mask=batch.special_tokens_mask,
                exclude_special=exclude_special,
            )
            if normalize:
                vec = _l2(vec)
            arr = to_float32_numpy(vec)
            if name not in out:
                out[name] = np.empty((n, arr.shape[1]), dtype=np.float32)
            out[name][batch.indices] = arr
        stats.num_tokens += int(batch.attention_mask.sum())
        stats.truncated.extend(int(i) for i in batch.indices[batch.truncated])
        if progress is not None:
            progress(len(batch.indices))
    if not out:
        # No texts: widths still follow from a forward pass of nothing, so ask for a dummy.
        probe = embed(["x"], encoder, names if as_dict else names[0], normalize=normalize,
                      layers=layers, layer_how=layer_how)  # fmt: skip
        probes = probe if as_dict else {names[0]: probe}
        out = {k: np.empty((0, v.shape[1]), np.float32) for k, v in probes.items()}
    stats.num_texts = n
    stats.truncated.sort()
    stats.dims = {k: int(v.shape[1]) for k, v in out.items()}
    stats.seconds = time.perf_counter() - start
    _warn_truncated(stats)
    result: Any = out if as_dict else out[names[0]]
    return (result, stats) if return_stats else result


def embed_tokens(
    texts: Sequence[str],
    model: ModelRef = None,
    *,
    layers: Layers = None,
    layer_how: str = "mean",
    long_text: LongText = "truncate",
    max_length: int | None = None,
    device: str = "auto",
    dtype: Any = None,
) -> list[TokenVectors]:
    """Per text: its tokens, their character offsets and vectors; special tokens removed.

    Returns:
        ``N`` :class:`TokenVectors` in input order; text ``i`` has ``n_i`` tokens
        (after truncation, which warns), vectors ``(n_i, H)`` float32.
    """
    from poolkit.tokens import token_embeddings

    texts = _check_inputs(texts)
    encoder = get_encoder(model, device=device, dtype=dtype, max_length=max_length)
    result: list[TokenVectors | None] = [None] * len(texts)
    stats = EmbedStats(max_length=encoder.max_length, num_texts=len(texts))
    for batch in encoder.iter_batches(texts, all_layers=layers is not None, long_text=long_text):
        hidden = _hidden(batch, layers, layer_how)
        per_row = token_embeddings(hidden, batch.special_tokens_mask, batch.attention_mask)
        keep = (batch.attention_mask != 0) & ~batch.special_tokens_mask
        for j, i in enumerate(batch.indices):
            ids = batch.input_ids[j][keep[j]]
            result[i] = TokenVectors(
                tokens=encoder.tokenizer.convert_ids_to_tokens(ids.tolist()),
                offsets=batch.offsets[j][keep[j]],
                vectors=to_float32_numpy(per_row[j]),
            )
        stats.truncated.extend(int(i) for i in batch.indices[batch.truncated])
    _warn_truncated(stats)
    return result  # type: ignore[return-value]


def embed_words(
    words: Sequence[Sequence[str]],
    model: ModelRef = None,
    strategy: str = "first",
    *,
    layers: Layers = None,
    layer_how: str = "mean",
    long_text: LongText = "truncate",
    max_length: int | None = None,
    device: str = "auto",
    dtype: Any = None,
) -> list[np.ndarray]:
    """Word vectors for pre-split words (CoNLL style), pooled from sub-tokens.

    Args:
        words: ``N`` lists of words.
        strategy: ``first``, ``last``, ``mean``, ``max`` or ``first_last`` (``2H``).

    Returns:
        ``N`` float32 arrays ``(W_i, D)`` in input order, one row per word. A word with no
        sub-token (e.g. only whitespace, or cut by truncation, which warns) gets zeros.
    """
    from poolkit.words import word_embeddings

    words = _check_inputs(words, words=True)
    encoder = get_encoder(model, device=device, dtype=dtype, max_length=max_length)
    result: list[np.ndarray | None] = [None] * len(words)
    stats = EmbedStats(max_length=encoder.max_length, num_texts=len(words))
    for batch in encoder.iter_batches(
        words, all_layers=layers is not None, long_text=long_text, is_split_into_words=True
    ):
        hidden = _hidden(batch, layers, layer_how)
        counts = [len(words[i]) for i in batch.indices]
        vecs = to_float32_numpy(
            word_embeddings(hidden, batch.word_ids, strategy, num_words=max(max(counts), 1))
        )
        for j, i in enumerate(batch.indices):
            result[i] = vecs[j, : counts[j]]
        stats.truncated.extend(int(i) for i in batch.indices[batch.truncated])
    _warn_truncated(stats, "word lists")
    return result  # type: ignore[return-value]


def char_to_token_spans(
    offsets: np.ndarray, valid: np.ndarray, spans: np.ndarray, *, row: int = 0
) -> np.ndarray:
    """Map half-open character spans to inclusive token spans.

    Args:
        offsets: ``(L, 2)`` half-open character offsets of one row's tokens.
        valid: ``(L,)`` bool, tokens that may be part of a span (real, not special).
        spans: ``(S, 2)`` int character spans ``[start, end)``.
        row: index of the text, for messages.

    Returns:
        ``(S, 2)`` int64 inclusive token spans ``[first, last]``: every token that
        overlaps the characters.

    Raises:
        ValueError: a span covers no token (only whitespace, or cut by truncation).
    """
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    starts, ends = offsets[:, 0], offsets[:, 1]
    hit = (
        valid[None, :]
        & (ends > starts)[None, :]
        & (starts[None, :] < spans[:, 1:2])
        & (ends[None, :] > spans[:, 0:1])
    )
    empty = np.flatnonzero(~hit.any(axis=1))
    if empty.size:
        k = int(empty[0])
        a, b = (int(x) for x in spans[k])
        raise ValueError(
            f"Expected `char_spans[{row}][{k}]` = ({a}, {b}) to cover at least one token of "
            f"texts[{row}], but it covers none (only whitespace, or past the max length: "
            "pass long_text='chunk'). Spans are half-open [start, end) character offsets."
        )
    first = hit.argmax(axis=1)
    last = hit.shape[1] - 1 - hit[:, ::-1].argmax(axis=1)
    return np.stack([first, last], axis=1).astype(np.int64)


def _span_pair(pair: Any, arg: str) -> tuple[int, int]:
    ok = isinstance(pair, Sequence | np.ndarray) and not isinstance(pair, str) and len(pair) == 2
    if ok:
        a, b = pair[0], pair[1]
        ok = all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in (a, b))
    if not ok:
        raise TypeError(
            f"Expected `{arg}` to be a (start, end) pair of ints, but got {pair!r:.60}."
        )
    return int(a), int(b)


def _check_char_spans(texts: Sequence[str], char_spans: Any) -> list[np.ndarray]:
    if not isinstance(char_spans, Sequence | np.ndarray) or isinstance(char_spans, str):
        raise TypeError(
            f"Expected `char_spans` to be a list with one list of (start, end) pairs per "
            f"text, but got {type(char_spans).__name__}."
        )
    if len(char_spans) != len(texts):
        raise ValueError(
            f"Expected `char_spans` to have one list of spans per text ({len(texts)}), but "
            f"got {len(char_spans)}."
        )
    checked = []
    for i, (text, spans) in enumerate(zip(texts, char_spans, strict=True)):
        arg = f"char_spans[{i}]"
        if not isinstance(spans, Sequence | np.ndarray) or isinstance(spans, str):
            raise TypeError(
                f"Expected `{arg}` to be a list of (start, end) pairs, but got "
                f"{type(spans).__name__}."
            )
        if len(spans) and all(isinstance(x, int | np.integer) for x in spans):
            raise TypeError(
                f"Expected `{arg}` to be a list of (start, end) pairs, but got the bare pair "
                f"{tuple(spans)!r:.40}; wrap it: [{tuple(spans)!r:.40}]."
            )
        pairs = [_span_pair(pair, f"{arg}[{k}]") for k, pair in enumerate(spans)]
        for k, (a, b) in enumerate(pairs):
            if not 0 <= a < b <= len(text):
                raise ValueError(
                    f"Expected `char_spans[{i}][{k}]` to be (start, end) with 0 <= start < end "
                    f"<= len(texts[{i}]) = {len(text)}, but got ({a}, {b}). Spans are "
                    "half-open character offsets, like text[start:end]."
                )
        checked.append(np.asarray(pairs, dtype=np.int64).reshape(-1, 2))
    return checked


def embed_spans(
    texts: Sequence[str],
    char_spans: Sequence[Sequence[tuple[int, int]]],
    model: ModelRef = None,
    strategy: str = "endpoints",
    *,
    layers: Layers = None,
    layer_how: str = "mean",
    long_text: LongText = "truncate",
    max_length: int | None = None,
    device: str = "auto",
    dtype: Any = None,
    return_token_spans: bool = False,
) -> Any:
    """Span vectors from character spans in raw text.

    Args:
        texts: ``N`` strings.
        char_spans: per text, ``S_i`` half-open character spans ``(start, end)`` like
            ``text[start:end]``. Each becomes the *inclusive* token span of every token
            overlapping it ("at Google" in "John works at Google" -> tokens 3..4).
        strategy: any ``span_embeddings`` strategy: ``endpoints`` (``2H``), ``mean``,
            ``max``, ``attention``, ``diff_sum`` or combinations like ``"x,y,x*y"``.
        return_token_spans: also return the inclusive token spans (positions in the
            tokenized text, [CLS] = 0).

    Returns:
        ``N`` float32 arrays ``(S_i, D)`` in input order (or a pair with the ``N`` int64
        ``(S_i, 2)`` token spans).

    Raises:
        ValueError: a span outside its text, or covering no token.
    """
    from poolkit.spans import span_embeddings

    texts = _check_inputs(texts)
    spans_in = _check_char_spans(texts, char_spans)
    encoder = get_encoder(model, device=device, dtype=dtype, max_length=max_length)
    result: list[np.ndarray | None] = [None] * len(texts)
    token_spans: list[np.ndarray | None] = [None] * len(texts)
    for batch in encoder.iter_batches(texts, all_layers=layers is not None, long_text=long_text):
        valid = (batch.attention_mask != 0) & ~batch.special_tokens_mask
        counts = [len(spans_in[i]) for i in batch.indices]
        width = max(max(counts), 1)
        spans = np.full((len(batch.indices), width, 2), -1, dtype=np.int64)
        for j, i in enumerate(batch.indices):
            mapped = char_to_token_spans(batch.offsets[j], valid[j], spans_in[i], row=int(i))
            spans[j, : counts[j]] = mapped
            # Positions relative to the text's first real token, so left padding is hidden.
            first_real = int(np.argmax(batch.attention_mask[j] != 0))
            token_spans[i] = mapped - first_real
        hidden = _hidden(batch, layers, layer_how)
        vecs = to_float32_numpy(span_embeddings(hidden, spans, strategy, mask=batch.attention_mask))
        for j, i in enumerate(batch.indices):
            result[i] = vecs[j, : counts[j]]
    return (result, token_spans) if return_token_spans else result
