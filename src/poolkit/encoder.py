"""Encoder: tokenizer + model + batching; turns texts into hidden states.

Three stages, kept apart so that each can be replaced:

1. :meth:`Encoder.tokenize` (host): texts -> :class:`Tokenized`, without special tokens.
2. Planning (host, NumPy): each text becomes ``prefix + content + suffix`` (the
   tokenizer's template); within each window of :data:`SORT_WINDOW` consecutive inputs,
   sequences are sorted by length and cut into token-budget batches.
3. :meth:`Backend.forward` (:mod:`poolkit.backends`, picked by name): one padded batch ->
   hidden states; the only place a runtime is touched.

:meth:`Encoder.iter_batches` yields an :class:`EncodedBatch` per batch (hidden states, the
masks to pool them, the input row indices), so several recipes share one forward pass.

Padding: encoder (bidirectional) models are always padded on the right; decoder models
use their tokenizer's side, and under left padding get position ids counted from each
row's first real token, so padding never changes a result.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from poolkit._errors import type_error, value_error
from poolkit.backends import Backend, make_backend
from poolkit.errors import InputTypeError
from poolkit.model_folder import ModelInfo, read_model_info, resolve_model
from poolkit.tokenizer import TextTokenizer, load_tokenizer

__all__ = [
    "Backend",
    "EncodedBatch",
    "Encoder",
    "SpecialTokens",
    "Tokenized",
    "device_batch_tokens",
    "prefetched",
]

LongText = Literal["truncate", "window"]

# Inputs sorted and batched together. A text's floats depend on the batch it shares (the
# CPU's kernels block by the padded shape: docs/equality.md), so batches never cross a
# window: the library, `poolkit embed` with its default --part-size (this value) and
# `compare` then put every text in the same batch, and give the same bits.
SORT_WINDOW = 4096


@dataclass(frozen=True)
class Tokenized:
    """Tokens of each text, special tokens not added yet.

    Per text ``i`` (``n_i`` tokens): ``ids[i]`` ``(n_i,)`` int64, ``offsets[i]`` ``(n_i, 2)``
    int64 character offsets ``[start, end)``, ``word_ids[i]`` ``(n_i,)`` int64 (-1: none),
    ``special[i]`` ``(n_i,)`` bool (special tokens typed in the text, e.g. ``[SEP]``);
    ``prompt[i]`` ``(n_i,)`` bool marks a prompt's tokens (offsets ``(0, 0)``, word id -1),
    ``prompt`` is ``None`` without one.
    """

    ids: list[np.ndarray]
    offsets: list[np.ndarray]
    word_ids: list[np.ndarray]
    special: list[np.ndarray]
    prompt: list[np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.ids)


@dataclass
class EncodedBatch:
    """One forward pass over a batch of texts, with everything needed to pool it.

    ``B`` texts, padded to ``L`` tokens. Each row is ``prefix + tokens + suffix`` (the
    tokenizer's special tokens around the text's tokens); with ``long_text="window"`` a
    row holds *all* of a text's tokens, stitched from overlapping windows, so ``L`` may
    exceed the model's max length.

    Attributes:
        indices: ``(B,)`` int64, position of each row in the input passed to
            :meth:`Encoder.iter_batches`. Rows come sorted by length, not in input order.
        input_ids: ``(B, L)`` int64 token ids (padding id at padded positions).
        attention_mask: ``(B, L)`` int64, 1 for real tokens, 0 for padding.
        special_tokens_mask: ``(B, L)`` bool, True for special tokens (template tokens
            and special tokens typed in the text); False at padding.
        offsets: ``(B, L, 2)`` int64 half-open character offsets ``[start, end)`` into the
            text; ``(0, 0)`` for special tokens and padding.
        word_ids: ``(B, L)`` int64 word index per token, -1 for special tokens and padding.
        hidden: last layer ``(B, L, H)`` on the backend's device, in the model's dtype.
        hidden_states: with ``all_layers=True``, ``num_layers + 1`` arrays ``(B, L, H)``
            (0: embedding output, -1: ``hidden``); else None.
        truncated: ``(B,)`` bool, True where tokens were cut at the max length.
        num_tokens: ``(B,)`` int64, tokens of each text before truncation, specials included.
        prompt_mask: ``(B, L)`` bool, True at the prompt's tokens; ``None`` without prompt.
        pool_mask: ``(B, L)`` int64, the mask sequence pooling uses with ``include_prompt:
            false`` (the first :meth:`Encoder.prompt_length` tokens zeroed); else ``None``.
    """

    indices: np.ndarray
    input_ids: np.ndarray
    attention_mask: np.ndarray
    special_tokens_mask: np.ndarray
    offsets: np.ndarray
    word_ids: np.ndarray
    hidden: Any
    hidden_states: tuple[Any, ...] | None
    truncated: np.ndarray
    num_tokens: np.ndarray
    prompt_mask: np.ndarray | None = None
    pool_mask: np.ndarray | None = None


@dataclass(frozen=True)
class SpecialTokens:
    """The tokens an :class:`Encoder` frames each text with, and the ids it counts as special.

    Every sequence is ``prefix + text tokens + suffix`` (then ``pad_id`` padding).

    Attributes:
        prefix: ``(P,)`` ids before each text's tokens, in order (BERT: ``[CLS]``).
        suffix: ``(S,)`` ids after them, in order (BERT: ``[SEP]``; EOS with ``append_eos``).
        special_ids: ``(K,)`` sorted ids marked special wherever they occur in a text (the
            tokenizer's special ids less ``[UNK]``, which stands for real text).
        pad_id: the id that fills padded positions.
    """

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    special_ids: tuple[int, ...]
    pad_id: int

    @property
    def ids(self) -> tuple[int, ...]:
        """``(N,)`` sorted ids ``exclude_special`` can leave out of pooling: all three sets."""
        return tuple(sorted({*self.prefix, *self.suffix, *self.special_ids}))


CPU_BATCH_TOKENS = 2048
CALIBRATION_TEXTS = 300  # texts of ``calibrate=`` used (NNCF's default subset size)
ACCELERATOR_BATCH_TOKENS = 16384
# The CUDA budget rule (device_batch_tokens): the share of the free memory a batch may
# take, and the bounds of the budget (a power of two).
CUDA_MEMORY_SHARE = 0.4
CUDA_BATCH_TOKENS = (1024, 131072)


def device_batch_tokens(
    free_bytes: int,
    *,
    hidden: int,
    layers: int,
    heads: int,
    intermediate: int,
    max_length: int,
    dtype_bytes: int,
) -> int:
    """The token budget of a batch on a CUDA device with ``free_bytes`` free: a pure rule.

    A token holds, in ``dtype_bytes``, every layer's output (``(layers + 1) * hidden``), one
    layer's working set (``4 * hidden + intermediate``) and its attention scores (``heads *
    max_length``), plus pooling's float32 copy and result (``8 * hidden`` bytes). The budget:
    :data:`CUDA_MEMORY_SHARE` of the free memory over that, rounded down to a power of two,
    within :data:`CUDA_BATCH_TOKENS`.
    """
    per_token = (
        dtype_bytes * ((layers + 1) * hidden + 4 * hidden + intermediate + heads * max_length)
        + 8 * hidden
    )
    tokens = int(free_bytes * CUDA_MEMORY_SHARE) // max(per_token, 1)
    low, high = CUDA_BATCH_TOKENS
    power = 1 << (max(tokens, 1).bit_length() - 1)
    return min(max(power, low), high)


def prefetched(
    items: Sequence[Any], prepare: Callable[[Any], Any], *, enabled: bool = True
) -> Iterator[tuple[Any, Any]]:
    """``(item, prepare(item))`` for each of ``items``, in order.

    With ``enabled``, ``prepare`` of the next item (one at most) runs on a background thread
    while the caller works on the current one; it must not depend on the caller's work.
    Its exception is raised at its item, after every earlier item was delivered; leaving
    the loop early waits for (and drops) the prepared item.
    """
    if not enabled or len(items) < 2:
        for item in items:
            yield item, prepare(item)
        return
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(1, thread_name_prefix="poolkit-prefetch")
    try:
        ahead = pool.submit(prepare, items[0])
        for k, item in enumerate(items):
            ready = ahead.result()
            if k + 1 < len(items):
                ahead = pool.submit(prepare, items[k + 1])
            yield item, ready
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _default_batch_tokens(backend: Any, max_length: int) -> int:
    """``max_batch_tokens=None``: :data:`CPU_BATCH_TOKENS` on the CPU, :func:`device_batch_tokens`
    on CUDA, :data:`ACCELERATOR_BATCH_TOKENS` elsewhere or when the model's shape is unknown."""
    device = str(getattr(backend, "device", "cpu"))
    if device == "cpu":
        # CPU matmuls run best on batches that stay in cache: 2048 tokens measured ~2x
        # the throughput of 16384 (bench/bench_speed.py); accelerators want big batches.
        return CPU_BATCH_TOKENS
    config = getattr(getattr(backend, "model", None), "config", None)
    if not device.startswith("cuda") or config is None:
        return ACCELERATOR_BATCH_TOKENS
    import torch

    hidden = getattr(config, "hidden_size", None)
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_attention_heads", None)
    if not all(isinstance(v, int) and v > 0 for v in (hidden, layers, heads)):
        return ACCELERATOR_BATCH_TOKENS
    inner = getattr(config, "intermediate_size", None) or getattr(config, "d_ff", None)
    dtype = getattr(backend, "dtype", None) or torch.float32
    free, _ = torch.cuda.mem_get_info(torch.device(device))
    return device_batch_tokens(free, hidden=hidden, layers=layers, heads=heads,
                               intermediate=int(inner or 4 * hidden), max_length=max_length,
                               dtype_bytes=torch.empty((), dtype=dtype).element_size())  # fmt: skip


class Encoder:
    """A Hugging Face model and its fast tokenizer, run in batches under inference mode.

    Args:
        model: local directory or hub id (:func:`poolkit.model_folder.resolve_model`);
            ``None``: :data:`~poolkit.model_folder.DEFAULT_MODEL` (all-MiniLM-L6-v2).
        device: ``"auto"`` (CUDA, then MPS, then CPU), or a torch device string.
        dtype: ``None``, ``"float16"``, ``"bfloat16"``, ``"float32"`` or a ``torch.dtype``.
            ``None``: float32 on the CPU; on CUDA the checkpoint's stored type, as
            sentence-transformers loads it (:func:`poolkit.backends.pytorch.default_dtype`).
        max_length: tokens per sequence, specials included; ``None`` uses the model's
            (:attr:`ModelInfo.max_length`).
        max_batch_tokens: token budget per batch, ``rows * padded length``; ``None``:
            ``CPU_BATCH_TOKENS`` (2048) on the CPU, :func:`device_batch_tokens` on CUDA,
            ``ACCELERATOR_BATCH_TOKENS`` (16384) else.
        max_batch_size: optional cap on rows per batch.
        append_eos: add the EOS token to every sequence when the tokenizer does not;
            ``None`` (default): no, like the model's own pipeline.
        backend: ``"torch"``, ``"onnx"`` (ONNX Runtime on the CPU, exported once and
            cached; :mod:`poolkit.backends.onnx`), ``"openvino"`` (that export run by
            OpenVINO on the CPU; ``dtype="bfloat16"`` for bf16 where the CPU has it;
            :mod:`poolkit.backends.openvino`) or an object implementing :class:`Backend`.
        quantize: ``None``, ``"int8"`` (dynamic int8; ``backend="onnx"``) or
            ``"int8-static"`` (static int8 calibrated on ``calibrate``; ``backend="openvino"``).
        calibrate: with ``quantize="int8-static"`` (required then, refused otherwise):
            texts to calibrate int8 activation ranges on, ideally some of those you will
            embed, as long as they are (short-only calibration put long texts at cosine
            0.94 to fp32); the first :data:`CALIBRATION_TEXTS` are used.
        num_threads: if given, ``torch.set_num_threads(num_threads)`` (and ORT's threads).
        defer_load: the torch backend loads the weights at the first forward pass, not now:
            with a token-state cache (``state_cache``, :mod:`poolkit.state_cache`) that
            holds every text, they are never loaded.

    Attributes:
        info: the model's :class:`ModelInfo`.
        head: the modules after pooling (:class:`poolkit.head.Head`).
        tokenizer: the fast tokenizer (:class:`poolkit.tokenizer.TextTokenizer`).
        max_length: effective max tokens per sequence.
        special_tokens: the template around each text and the special ids (:class:`SpecialTokens`).
        prefetch: lay out the next batch on a background thread while the current one runs
            (:func:`prefetched`); on by default off the CPU. Results are the same either way.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        device: str = "auto",
        dtype: Any = None,
        max_length: int | None = None,
        max_batch_tokens: int | None = None,
        max_batch_size: int | None = None,
        append_eos: bool | None = None,
        backend: str | Backend = "torch",
        quantize: str | None = None,
        calibrate: Sequence[str] | None = None,
        num_threads: int | None = None,
        defer_load: bool = False,
    ) -> None:
        check_batch_tokens(max_batch_tokens)
        check_batch_tokens(max_batch_size, "max_batch_size")
        from poolkit.model_folder import DEFAULT_MODEL

        reference = DEFAULT_MODEL if model is None else os.fspath(model)
        path = resolve_model(reference)
        self.tokenizer: TextTokenizer = load_tokenizer(path)
        self.info: ModelInfo = read_model_info(path, reference=reference, tokenizer=self.tokenizer)
        from poolkit.head import read_head

        # The modules after pooling (Dense, LayerNorm, Normalize), applied by embed.
        self.head = read_head(path)
        limit = max_length if max_length is not None else self.info.max_length
        if limit is None:
            value_error(
                "max_length",
                "a number of tokens",
                f"None, and model {reference!r} states no max length",
                "Pass `max_length=` explicitly.",
            )
        self.max_length = int(limit)
        self.max_batch_size = max_batch_size
        # What else shapes the states (a token-state cache's key, poolkit.state_cache).
        self.quantize = quantize
        self.backend_name = backend if isinstance(backend, str) else (
            getattr(backend, "name", None) or type(backend).__qualname__)  # fmt: skip
        self.calibration_digest = None
        if calibrate is not None:
            from poolkit.io.integrity import texts_digest

            self.calibration_digest = texts_digest([str(t) for t in calibrate])
        self.state_cache: Any = None
        self._prefix, self._suffix = self._template()
        eos = self.tokenizer.eos_token_id
        if append_eos and eos is not None and (not self._suffix or self._suffix[-1] != eos):
            self._suffix = [*self._suffix, int(eos)]
        self._text_room = self.max_length - len(self._prefix) - len(self._suffix)
        if self._text_room < 1:
            value_error(
                "max_length",
                f"more than the {len(self._prefix) + len(self._suffix)} special tokens, "
                "to leave room for text",
                self.max_length,
            )
        # [UNK] stands for real text (an emoji, a rare script): it is content, not special.
        unk = self.tokenizer.unk_token_id
        self._special_ids = np.asarray(
            sorted(set(self.tokenizer.all_special_ids) - {unk}), dtype=np.int64
        )
        pad = self.tokenizer.pad_token_id
        self._pad_id = int(pad if pad is not None else (eos if eos is not None else 0))
        self._left = self.info.is_decoder and self.tokenizer.padding_side == "left"
        self._type_ids = "token_type_ids" in self.tokenizer.model_input_names
        if num_threads is not None:
            import torch

            torch.set_num_threads(int(num_threads))
        if backend in ("onnx", "openvino") and self._left:
            # Refused before exporting: the graph takes no position ids.
            value_error(
                "backend",
                "'torch' for a left-padded decoder model",
                f"{backend!r}: {self.info.reference!r} pads on the left and the ONNX export "
                "takes no position ids",
                "Use backend='torch'.",
            )
        if isinstance(backend, str):
            # The registry builds it (and refuses an unknown name or quantization).
            calibration = None if calibrate is None else self._calibration(calibrate)
            self.backend: Backend = make_backend(
                backend,
                path,
                device=device,
                dtype=dtype,
                quantize=quantize,
                threads=num_threads,
                calibration=calibration,
                defer=defer_load,
            )
        else:
            if calibrate is not None:
                value_error("calibrate", "None with a Backend object", "calibration texts",
                            "Calibrate when building the backend.")  # fmt: skip
            self.backend = backend
        self.device = str(getattr(self.backend, "device", "cpu"))
        if max_batch_tokens is None:
            max_batch_tokens = _default_batch_tokens(self.backend, self.max_length)
        self.max_batch_tokens: int = max_batch_tokens
        # Lay out the next batch while the device runs this one (see prefetched()).
        self.prefetch: bool = self.device != "cpu"

    def _calibration(self, texts: Any) -> list[dict[str, np.ndarray]]:
        """One ``(1, L)`` input dict per calibration text (the first
        :data:`CALIBRATION_TEXTS`), laid out as :meth:`iter_batches` lays out its rows."""
        if isinstance(texts, str) or not isinstance(texts, Sequence) or not texts:
            type_error("calibrate", "a non-empty list of str", f"{type(texts).__name__}"
                       + ("" if isinstance(texts, str) or texts else " (empty)"),
                       "Pass some of the texts you will embed.")  # fmt: skip
        items = check_texts(list(texts[:CALIBRATION_TEXTS]), False)
        tok = self.tokenize(self._cap_long_texts(items))
        kept = np.minimum([len(x) for x in tok.ids], self._text_room).astype(np.int64)
        lays = (self._layout(tok, np.asarray([i]), kept) for i in range(len(items)))
        return [self.model_inputs(x["input_ids"], x["attention_mask"]) for x in lays]

    def __repr__(self) -> str:
        return (
            f"Encoder({self.info.reference!r}, device={self.device!r}, "
            f"max_length={self.max_length}, max_batch_tokens={self.max_batch_tokens})"
        )

    @property
    def pads_left(self) -> bool:
        """Whether sequences are padded on the left (a decoder whose tokenizer says so)."""
        return self._left

    @property
    def text_room(self) -> int:
        """Tokens of a text one sequence holds: ``max_length`` less the special tokens."""
        return self._text_room

    @property
    def special_tokens(self) -> SpecialTokens:
        """The template around each text and the ids counted as special (a copy)."""
        return SpecialTokens(
            prefix=tuple(self._prefix),
            suffix=tuple(self._suffix),
            special_ids=tuple(int(i) for i in self._special_ids),
            pad_id=self._pad_id,
        )

    def _template(self) -> tuple[list[int], list[int]]:
        """Special tokens the tokenizer puts before and after a single text."""
        probe = "hello"
        full = self.tokenizer.encode(probe, special_tokens=True).ids
        bare = self.tokenizer.encode(probe, special_tokens=False).ids
        for k in range(len(full) - len(bare) + 1):
            if full[k : k + len(bare)] == bare:
                return [int(t) for t in full[:k]], [int(t) for t in full[k + len(bare) :]]
        return [], []

    # -- stage 1: tokenization -------------------------------------------------------

    def tokenize(
        self,
        texts: Sequence[str] | Sequence[Sequence[str]],
        *,
        is_split_into_words: bool = False,
        prompt: str | None = None,
    ) -> Tokenized:
        """Tokenize without special tokens and without truncation.

        Args:
            texts: ``N`` strings, or with ``is_split_into_words=True`` ``N`` lists of words.
            prompt: text put before each text (as the model's pipeline does: ``prompt +
                text``, tokenized together; for word lists, the prompt's words first).

        Returns:
            :class:`Tokenized` with ``N`` entries.
        """
        texts = check_texts(texts, is_split_into_words)
        if not texts:
            return Tokenized([], [], [], [])
        words_before = prompt.split() if prompt and is_split_into_words else []
        if prompt:
            texts = [[*words_before, *t] for t in texts] if is_split_into_words else (
                [prompt + t for t in texts])  # fmt: skip
        encodings = self.tokenizer.encode_batch(texts, words=is_split_into_words)
        # All rows at once, then split into per-row views: a few bulk conversions instead
        # of four NumPy calls a text (the same integers; the host's share of a GPU run).
        n = len(encodings)
        per_row = [(e.ids, e.offsets, e.word_ids) for e in encodings]
        lengths = np.fromiter((len(r[0]) for r in per_row), np.int64, count=n)
        total = int(lengths.sum())
        chain = itertools.chain.from_iterable
        flat_ids = np.fromiter(chain(r[0] for r in per_row), np.int64, count=total)
        flat_off = np.fromiter(chain(chain(r[1] for r in per_row)), np.int64, count=2 * total)
        flat_words = np.fromiter((-1 if w is None else w for r in per_row for w in r[2]),
                                 np.int64, count=total)  # fmt: skip
        cuts = np.cumsum(lengths)[:-1]
        ids = np.split(flat_ids, cuts)
        offsets = np.split(flat_off.reshape(-1, 2), cuts)
        word_ids = np.split(flat_words, cuts)
        special = np.split(np.isin(flat_ids, self._special_ids), cuts)
        if not prompt:
            return Tokenized(ids, offsets, word_ids, special)
        in_prompt = []
        for i in range(n):
            offsets[i], word_ids[i], mask = _strip_prompt(offsets[i], word_ids[i], prompt,
                                                          len(words_before))  # fmt: skip
            in_prompt.append(mask & ~special[i])
        return Tokenized(ids, offsets, word_ids, special, in_prompt)

    def prompt_length(self, prompt: str) -> int:
        """Tokens of ``prompt`` that ``include_prompt: false`` keeps out of pooling, counted
        as sentence-transformers counts them: the prompt tokenized alone with the
        tokenizer's template, less a trailing special token (so a leading [CLS]/BOS counts)."""
        ids = self.tokenizer.encode(prompt, special_tokens=True).ids
        return len(ids) - int(bool(ids) and ids[-1] in self.tokenizer.all_special_ids)

    # -- stage 2 + 3: planning and forward ---------------------------------------------

    def iter_batches(
        self,
        texts: Sequence[str] | Sequence[Sequence[str]] | Tokenized,
        *,
        all_layers: bool = False,
        long_text: LongText = "truncate",
        is_split_into_words: bool = False,
        stride: int | None = None,
        max_batch_tokens: int | None = None,
        prompt: str | None = None,
    ) -> Iterator[EncodedBatch]:
        """Run the model over ``texts`` in token-budget batches, longest first within each
        window of :data:`SORT_WINDOW` inputs (a batch never spans two).

        Args:
            texts: ``N`` strings, ``N`` word lists (``is_split_into_words=True``), or the
                output of :meth:`tokenize`.
            all_layers: also return every layer (``EncodedBatch.hidden_states``).
            long_text: ``"truncate"`` cuts each text at ``max_length`` tokens; ``"window"``
                stitches overlapping windows into rows holding all of a text's tokens (each
                token's vector from the window where it sits furthest from an edge).
            stride: window step for ``"window"``; default half a window.
            max_batch_tokens: token budget for this call; default the Encoder's.
            prompt: text put before every text (see :meth:`tokenize`), counted in
                ``max_length``; see ``EncodedBatch.pool_mask``.

        Yields:
            :class:`EncodedBatch` per batch, every input row in exactly one, ordered by
            length, not input order: use ``EncodedBatch.indices``.
        """
        if long_text not in ("truncate", "window"):
            value_error("long_text", "'truncate' or 'window'", repr(long_text))
        if isinstance(texts, Tokenized):
            if prompt and texts.prompt is None:
                value_error(
                    "prompt",
                    "None for texts tokenized already",
                    f"{prompt!r:.40}",
                    "Pass the prompt to tokenize() instead.",
                )
            tok = texts
        else:
            items = check_texts(texts, is_split_into_words)
            if long_text == "truncate" and not is_split_into_words:
                items = self._cap_long_texts(items)
            tok = self.tokenize(items, is_split_into_words=is_split_into_words, prompt=prompt)
        skip = 0
        if tok.prompt is not None and not self.info.include_prompt and prompt:
            skip = self.prompt_length(prompt)
        n = len(tok)
        if n == 0:
            return
        content = np.fromiter((len(x) for x in tok.ids), dtype=np.int64, count=n)
        specials = len(self._prefix) + len(self._suffix)
        truncated = content > self._text_room
        kept = content if long_text == "window" else np.minimum(content, self._text_room)
        lengths = kept + specials
        budget = check_batch_tokens(max_batch_tokens) or self.max_batch_tokens
        cache, window = self.state_cache, (long_text, stride)
        keys: list[str] = []
        if cache is not None:
            keys = cache.lookup([self._fed_ids(tok, i, kept) for i in range(n)])
        # The usual plan, cache or not: a batch is read where all its rows are stored, else
        # encoded whole, so every number is the uncached run's (poolkit.state_cache).
        plan = [
            rows
            for first in range(0, n, SORT_WINDOW)
            for rows in self._plan(
                first + np.argsort(-lengths[first : first + SORT_WINDOW], kind="stable"),
                lengths,
                budget,
            )
        ]
        truncated &= long_text == "truncate"

        def run(rows: np.ndarray, lay: dict[str, np.ndarray], layers: bool) -> Any:
            if long_text == "window" and int(kept[rows].max()) > self._text_room:
                return self._windowed(tok, rows, kept, lay, layers, stride)
            inputs = self.model_inputs(lay["input_ids"], lay["attention_mask"])
            return self.backend.forward(inputs, all_layers=layers)

        for rows, lay in prefetched(plan, lambda rows: self._layout(tok, rows, kept),
                                    enabled=self.prefetch):  # fmt: skip
            if cache is None:
                out = run(rows, lay, all_layers)
            else:
                out = cache.forward(self, lay, [keys[i] for i in rows], all_layers, window,
                                    lambda every, r=rows, t=lay: run(r, t, every))  # fmt: skip
            layers = tuple(out) if all_layers else None
            yield EncodedBatch(
                indices=rows.astype(np.int64),
                input_ids=lay["input_ids"],
                attention_mask=lay["attention_mask"],
                special_tokens_mask=lay["special"],
                offsets=lay["offsets"],
                word_ids=lay["word_ids"],
                hidden=layers[-1] if layers is not None else out,
                hidden_states=layers,
                truncated=truncated[rows],
                num_tokens=(content + specials)[rows],
                prompt_mask=lay["prompt"],
                pool_mask=_skip_first(lay["attention_mask"], skip) if skip else None,
            )

    def _fed_ids(self, tok: Tokenized, i: int, kept: np.ndarray) -> np.ndarray:
        """The token ids row ``i`` feeds the model: the template around its kept tokens."""
        return np.concatenate([np.asarray(self._prefix, np.int64), tok.ids[i][: int(kept[i])],
                               np.asarray(self._suffix, np.int64)])  # fmt: skip

    def _cap_long_texts(self, texts: list[str]) -> list[str]:
        """Texts far beyond the max length, cut to a prefix that yields the same kept tokens.

        Tokenizing a 5 MB string in full costs hundreds of MB for tokens truncation drops.
        A prefix is used only when it tokenizes well past ``max_length`` and whitespace
        separates the kept tokens from the cut, so the kept tokens (the vector, the offsets)
        are the whole text's, which still counts as truncated.
        """
        limit = 64 * self.max_length  # characters; ordinary texts never reach it
        if all(len(t) <= limit for t in texts):
            return texts
        return [self._truncation_prefix(t, limit) if len(t) > limit else t for t in texts]

    def _truncation_prefix(self, text: str, size: int) -> str:
        keep, margin = self.max_length, 16
        while size < len(text):
            prefix = text[:size]
            offsets = self.tokenizer.encode(prefix, special_tokens=False).offsets
            if len(offsets) > keep + margin:
                gap = prefix[offsets[keep - 1][1] : offsets[keep + margin][0]]
                if any(ch.isspace() for ch in gap):
                    return prefix
            size *= 4
        return text

    def _plan(self, order: np.ndarray, lengths: np.ndarray, budget: int) -> Iterator[np.ndarray]:
        cap = self.max_batch_size or len(order)
        start = 0
        while start < len(order):
            longest = int(lengths[order[start]])
            # Rows are sorted longest first, so the first row sets the padded length.
            count = max(1, min(cap, budget // max(longest, 1)))
            yield order[start : start + count]
            start += count

    def _layout(self, tok: Tokenized, rows: np.ndarray, kept: np.ndarray) -> dict[str, np.ndarray]:
        """Padded ``(B, L)`` arrays for rows ``prefix + content[:kept] + suffix``.

        Built in bulk: each row's kept tokens are sliced once, concatenated, and scattered
        to their padded positions with one indexed assignment per array."""
        p, s = len(self._prefix), len(self._suffix)
        k = kept[rows]
        lens = k + p + s
        b, length = len(rows), int(lens.max())
        ids = np.full((b, length), self._pad_id, dtype=np.int64)
        special = np.zeros((b, length), dtype=bool)
        offsets = np.zeros((b, length, 2), dtype=np.int64)
        word_ids = np.full((b, length), -1, dtype=np.int64)
        in_prompt = np.zeros((b, length), dtype=bool)
        pos = np.arange(length)
        starts = (length - lens) if self._left else np.zeros(b, dtype=np.int64)
        mask = ((pos >= starts[:, None]) & (pos < (starts + lens)[:, None])).astype(np.int64)
        # Content tokens: row j's t-th kept token goes to column starts[j] + p + t.
        row_of = np.repeat(np.arange(b), k)
        first = np.cumsum(k) - k  # each row's first index into the concatenated content
        col = np.arange(int(k.sum())) - np.repeat(first, k) + np.repeat(starts + p, k)
        picked = [(int(i), int(c)) for i, c in zip(rows, k, strict=True)]
        arrays = (ids, special, offsets, word_ids, in_prompt)
        sources = (tok.ids, tok.special, tok.offsets, tok.word_ids, tok.prompt)
        for out, parts in zip(arrays, sources, strict=True):
            if parts is not None:
                out[row_of, col] = np.concatenate([parts[i][:c] for i, c in picked])
        # The template: prefix before each row's content, suffix after it.
        every = np.arange(b)[:, None]
        for at, part in ((starts, self._prefix), (starts + p + k, self._suffix)):
            cols = at[:, None] + np.arange(len(part))
            ids[every, cols] = np.asarray(part, np.int64)
            special[every, cols] = True
        return {"input_ids": ids, "attention_mask": mask, "special": special,
                "offsets": offsets, "word_ids": word_ids,
                "prompt": in_prompt if tok.prompt is not None else None}  # fmt: skip

    def model_inputs(self, ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
        """The backend's inputs for padded ``ids`` and ``mask`` ``(B, L)``: token type ids
        where the model takes them, position ids under left padding."""
        inputs = {"input_ids": ids, "attention_mask": mask}
        if self._type_ids:
            inputs["token_type_ids"] = np.zeros_like(ids)
        if self._left:
            # Decoders count positions from the first real token, whatever the padding.
            inputs["position_ids"] = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
        return inputs

    def _windowed(
        self,
        tok: Tokenized,
        rows: np.ndarray,
        kept: np.ndarray,
        lay: dict[str, np.ndarray],
        all_layers: bool,
        stride: int | None,
    ) -> Any:
        """Forward overlapping windows of each row and stitch them into ``lay``'s layout."""
        import torch

        w = self._text_room
        step = max(1, min(w, stride if stride is not None else w // 2))
        p, s = len(self._prefix), len(self._suffix)
        win_ids: list[np.ndarray] = []
        b, length = lay["input_ids"].shape
        # gather[j, t] = flat index (window row * window length + position) for token t.
        src_row = np.zeros((b, length), dtype=np.int64)
        src_pos = np.zeros((b, length), dtype=np.int64)
        for j, i in enumerate(rows):
            n = int(kept[i])
            starts = [*list(range(0, max(n - w, 0), step)), max(n - w, 0)]
            bounds = [0] + [(starts[k - 1] + w + starts[k]) // 2 for k in range(1, len(starts))]
            bounds.append(n)
            first = len(win_ids)
            win_ids.extend(tok.ids[i][a : a + w] for a in starts)
            c = length - (n + p + s) if self._left else 0
            for k, a in enumerate(starts):
                lo, hi = bounds[k], bounds[k + 1]
                src_row[j, c + p + lo : c + p + hi] = first + k
                src_pos[j, c + p + lo : c + p + hi] = p + np.arange(lo, hi) - a
            src_row[j, c : c + p] = first
            src_pos[j, c : c + p] = np.arange(p)
            last = len(win_ids) - 1
            src_row[j, c + p + n : c + p + n + s] = last
            src_pos[j, c + p + n : c + p + n + s] = p + len(win_ids[last]) + np.arange(s)
        win_tok = Tokenized(
            win_ids,
            [np.zeros((len(x), 2), np.int64) for x in win_ids],
            [np.full(len(x), -1, np.int64) for x in win_ids],
            [np.zeros(len(x), bool) for x in win_ids],
        )
        win_kept = np.fromiter((len(x) for x in win_ids), np.int64, count=len(win_ids))
        win = self._layout(win_tok, np.arange(len(win_ids)), win_kept)
        out = self.backend.forward(
            self.model_inputs(win["input_ids"], win["attention_mask"]), all_layers=all_layers
        )
        wl = win["input_ids"].shape[1]
        if self._left:
            # Window rows are left padded: shift positions by each window's padding.
            pad = wl - (win_kept + p + s)
            src_pos = src_pos + pad[src_row]
        flat = (src_row * wl + src_pos).reshape(-1)

        def stitch(h: Any) -> Any:
            t = h if isinstance(h, torch.Tensor) else torch.from_numpy(np.asarray(h))
            idx = torch.from_numpy(flat).to(t.device)
            return t.reshape(-1, t.shape[-1]).index_select(0, idx).reshape(b, length, -1)

        return tuple(stitch(h) for h in out) if all_layers else stitch(out)


def _strip_prompt(
    offsets: np.ndarray, word_ids: np.ndarray, prompt: str, prompt_words: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Offsets and word ids of one prompted row made relative to the user's text.

    Returns ``(offsets, word_ids, in_prompt)``. A string: tokens ending in the prompt get
    offsets ``(0, 0)`` and word id -1, the others move back by ``len(prompt)``. A word list
    (``prompt_words`` > 0): the prompt's words get -1, the others move back by it.
    """
    if prompt_words:
        in_prompt = (word_ids >= 0) & (word_ids < prompt_words)
        return offsets, np.where(word_ids >= prompt_words, word_ids - prompt_words, -1), in_prompt
    n = len(prompt)
    in_prompt = (offsets[:, 1] <= n) & (offsets[:, 1] > 0)
    shifted = np.maximum(offsets - n, 0)
    shifted[in_prompt] = 0
    first_word = int(word_ids[in_prompt].max()) + 1 if in_prompt.any() else 0
    words = np.where(in_prompt | (word_ids < 0), -1, np.maximum(word_ids - first_word, 0))
    return shifted, words, in_prompt


def _skip_first(mask: np.ndarray, count: int) -> np.ndarray:
    """``mask`` with each row's first ``count`` real positions zeroed (any padding side)."""
    rank = np.cumsum(mask != 0, axis=1)
    return np.where(rank > count, mask, 0).astype(mask.dtype)


def check_batch_tokens(value: Any, arg: str = "max_batch_tokens") -> int | None:
    """``value`` if it is ``None`` or a positive int; ValueError naming ``arg``."""
    if value is not None and (not isinstance(value, int) or value < 1):
        value_error(arg, "None or a positive integer", repr(value))
    return value


def check_texts(texts: Any, words: bool) -> list[Any]:
    """``texts`` as a list of strings (``words``: of word lists); else TypeError naming it."""
    if isinstance(texts, str):
        type_error("texts", "a list of strings", "a single str", "Wrap it: [text].")
    try:
        items = list(texts)
    except TypeError:
        raise InputTypeError(
            arg="texts", expected="a list of strings", got=type(texts).__name__
        ) from None
    for i, t in enumerate(items):
        if words:
            if isinstance(t, str) or not all(isinstance(w, str) for w in t):
                type_error(f"words[{i}]", "a list of strings (one text, pre-split)", repr(t))
        elif not isinstance(t, str):
            type_error(f"texts[{i}]", "a str", f"{type(t).__name__} ({t!r:.60})")
    return items
