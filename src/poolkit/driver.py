"""One loop from :meth:`Encoder.iter_batches` to pooled outputs, for every level.

:func:`drive` runs the batches and keeps the books; the caller's ``on_batch`` pools each.
Every ``embed*`` function, ``poolkit compare`` and the Ray ``Embedder`` go through it, so
truncation, batching, progress and stats behave the same at every level. The helpers
below pool one batch for a set of recipes, each distinct (layers, strategy) piece once.
"""

from __future__ import annotations

import time
import warnings
from collections import namedtuple
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poolkit._errors import value_error
from poolkit.output import l2_normalize

# Recipes are typed Any here: poolkit.recipe imports this module (Recipe.pool), no cycle.

__all__ = [
    "EmbedStats",
    "LayerViews",
    "TruncationWarning",
    "drive",
    "l2_normalize",
    "on_accelerator",
    "sequence_vectors",
    "to_float32_numpy",
    "warn_truncated",
]


class TruncationWarning(UserWarning):
    """Some texts were longer than the model's max length and were cut."""


@dataclass
class EmbedStats:
    """What one call did.

    Attributes:
        num_texts: texts (or word lists) embedded.
        num_tokens: real tokens fed to the model, specials included, after truncation.
        truncated: indices (into the input) of texts cut at ``max_length``.
        max_length: the max length used.
        max_batch_tokens: the token budget per forward batch actually used.
        seconds: wall time of the call (tokenization, forward, pooling).
        dims: output width per recipe name (dimensions kept, before any bit packing).
        calibration: the int8/uint8 ranges used, per recipe name (a
            :class:`poolkit.output.Calibration`: pass it as ``calibration=`` to quantise
            the next batch, e.g. queries, with the same ranges).
    """

    num_texts: int = 0
    num_tokens: int = 0
    truncated: list[int] = field(default_factory=list)
    max_length: int = 0
    max_batch_tokens: int = 0
    seconds: float = 0.0
    dims: dict[str, int] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)

    @property
    def num_truncated(self) -> int:
        return len(self.truncated)


def drive(
    encoder: Any,
    inputs: Sequence[Any],
    on_batch: Callable[[Any], None],
    *,
    all_layers: bool = False,
    long_text: str = "truncate",
    max_batch_tokens: int | None = None,
    is_split_into_words: bool = False,
    progress: Callable[[int], None] | None = None,
    prompt: str | None = None,
    stride: int | None = None,
) -> EmbedStats:
    """Run ``encoder`` over ``inputs`` (``N`` texts, word lists with ``is_split_into_words``,
    or a :class:`poolkit.encoder.Tokenized`), hand every batch to ``on_batch``, and return
    the run's :class:`EmbedStats` (``dims`` left for the caller). ``progress`` gets the rows
    finished after each batch; the rest as for :meth:`poolkit.Encoder.iter_batches`."""
    start = time.perf_counter()
    budget = max_batch_tokens or encoder.max_batch_tokens
    stats = EmbedStats(len(inputs), max_length=encoder.max_length, max_batch_tokens=budget)
    for batch in encoder.iter_batches(
        inputs,
        all_layers=all_layers,
        long_text=long_text,
        max_batch_tokens=max_batch_tokens,
        is_split_into_words=is_split_into_words,
        prompt=prompt,
        stride=stride,
    ):
        on_batch(batch)
        stats.num_tokens += int(batch.attention_mask.sum())
        stats.truncated.extend(int(i) for i in batch.indices[batch.truncated])
        if progress is not None:
            progress(len(batch.indices))
    stats.truncated.sort()
    stats.seconds = time.perf_counter() - start
    return stats


def warn_truncated(stats: EmbedStats, what: str = "texts", stacklevel: int = 3) -> None:
    """One :class:`TruncationWarning` naming how many inputs were cut, and which."""
    if stats.truncated:
        shown = ", ".join(str(i) for i in stats.truncated[:5])
        more = ", ..." if stats.num_truncated > 5 else ""
        warnings.warn(
            f"{stats.num_truncated} of {stats.num_texts} {what} were longer than "
            f"{stats.max_length} tokens and were truncated (indices {shown}{more}). Pass "
            "long_text='window' to embed all of their tokens.",
            TruncationWarning,
            stacklevel=stacklevel,
        )


def to_float32_numpy(x: Any) -> np.ndarray:
    """``x`` (a torch tensor on any device, or anything ``np.asarray`` takes) as float32
    NumPy of the same shape; no copy when it already is."""
    if hasattr(x, "detach"):
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)


# The fields of an encoder batch that pooling reads (torch.compile traces a namedtuple).
_Bare = namedtuple("_Bare", "hidden hidden_states attention_mask special_tokens_mask")


class LayerViews:
    """``views[recipe]``: the ``(B, L, H')`` hidden states a recipe pools over in one batch,
    the last layer or ``layer_mix`` of its layers (from ``batch.hidden_states``), mixed once."""

    def __init__(self, batch: Any) -> None:
        self.batch = batch
        self._cache: dict[tuple[Any, str], Any] = {}

    @classmethod
    def of(cls, hidden: Any, mask: Any = None, special_tokens_mask: Any = None) -> LayerViews:
        """Views of bare arrays (``nn`` modules, export): ``hidden`` ``(B, L, H)``, or every
        layer's ``(B, L, H)`` (embeddings first) for recipes that mix layers."""
        return cls(_Bare(hidden, hidden, mask, special_tokens_mask))

    def __getitem__(self, recipe: Any) -> Any:
        if recipe.layers is None:
            return self.batch.hidden
        key = (recipe.layers, recipe.layer_how)
        if key not in self._cache:
            from poolkit.layers import layer_mix

            self._cache[key] = layer_mix(self.batch.hidden_states, recipe.layers, recipe.layer_how)
        return self._cache[key]


def user_tokens(batch: Any) -> np.ndarray:
    """``(B, L)`` bool: the tokens of the user's text, neither padding, special (``[CLS]``,
    ``[SEP]``, ...) nor the prompt's (``batch.prompt_mask``, where the batch has one)."""
    keep = (batch.attention_mask != 0) & ~batch.special_tokens_mask
    prompt = getattr(batch, "prompt_mask", None)  # duck-typed batches may have none
    return keep if prompt is None else keep & ~prompt


def _refuse_rows_left_empty(batch: Any, recipes: list[Any]) -> None:
    """InputError naming the texts (first 5) with no token left to pool: after dropping
    special tokens (a ``_no_special`` part), or once the prompt is kept out of pooling
    (the model's pipeline would give them a zero vector)."""
    checks = []
    if any(drop for r in recipes for _, drop in r.parts):
        checks.append((
            (batch.attention_mask != 0) & ~batch.special_tokens_mask,
            "texts with at least one non-special token each (`exclude_special=True`)",
            "with none (empty strings?)",
            "Remove them or pass exclude_special=False.",
        ))  # fmt: skip
    if getattr(batch, "pool_mask", None) is not None:  # duck-typed batches may have none
        checks.append((
            batch.pool_mask != 0,
            "texts that keep at least one token after the prompt, which the model keeps out "
            "of pooling (include_prompt: false)",
            "that keep none (empty, or merged into the prompt's last token)",
            "Remove them or pass prompt=''.",
        ))  # fmt: skip
    for keep, want, none, fix in checks:
        empty = np.flatnonzero(~keep.any(axis=1))
        if empty.size:
            rows = ", ".join(str(int(batch.indices[j])) for j in empty[:5])
            value_error("texts", want, f"texts {rows} {none}", fix)


def sequence_vectors(
    views: LayerViews,
    recipes: Iterable[Any],
    *,
    model_normalize: bool = False,
    empty: str = "raise",
    heads: Mapping[Any, Any] | None = None,
    check: bool | str = True,
    host: bool = True,
) -> dict[Any, Any]:
    """Every sequence recipe for one batch, pooled by the one rule: ``(B, D_r)`` per recipe.

    Each distinct (layers, special-token choice) view is pooled by one
    :func:`poolkit.sequence.pool_named` call over all the names it needs (``check`` as
    there; ``False``: its vectorised path, unchecked); a recipe's parts are
    concatenated in its order, ``heads[recipe]`` (a :class:`poolkit.head.Head`) applies,
    then L2 as the recipe resolves ``model_normalize``. ``empty="raise"`` refuses rows
    with no token left (after special tokens or the prompt); ``"zeros"`` gives zeros
    (``compare``). The mask is ``batch.pool_mask`` where given, else ``attention_mask``.
    ``host=True``: float32 NumPy, pooled where the hidden states live (in float32 on an
    accelerator) and copied to the host once for all recipes. ``host=False`` (``nn``,
    traced export): as pooled (kind, device, dtype, autograd graph), checks by ``check``.
    """
    from poolkit._arrays import check_mode
    from poolkit.sequence import pool_named

    mode = check_mode(check)
    recipes = list(recipes)
    batch = views.batch
    pool_mask = getattr(batch, "pool_mask", None)  # duck-typed batches may have none
    mask = batch.attention_mask if pool_mask is None else pool_mask
    if host and empty == "raise":
        _refuse_rows_left_empty(batch, recipes)
    wanted: dict[tuple[Any, str, bool], list[str]] = {}
    owner: dict[tuple[Any, str, bool], Any] = {}
    for r in recipes:
        for name, drop in r.parts:
            key = (r.layers, r.layer_how, drop)
            owner.setdefault(key, r)
            if name not in wanted.setdefault(key, []):
                wanted[key].append(name)
    pieces: dict[tuple[Any, str, bool, str], Any] = {}
    device = False  # pooled on an accelerator: the rest stays there, one copy at the end
    for key, all_names in wanted.items():
        hidden = views[owner[key]]
        drop = key[2]
        for names in _same_width(all_names):  # built-ins in one call, each user pooling alone
            pooled = pool_named(
                hidden,
                mask,
                names,
                special_tokens_mask=batch.special_tokens_mask if drop else None,
                exclude_special=drop,
                empty=empty,  # type: ignore[arg-type]
                check=mode or False,
                dense=not mode,
            )
            if host:
                device = device or on_accelerator(pooled)
                pooled = pooled.float() if on_accelerator(pooled) else to_float32_numpy(pooled)
            width = pooled.shape[-1] // len(names)
            for k, name in enumerate(names):
                pieces[(*key, name)] = pooled[:, k * width : (k + 1) * width]
    out: dict[Any, Any] = {}
    for r in recipes:
        parts = [pieces[(r.layers, r.layer_how, drop, name)] for name, drop in r.parts]
        tensor = hasattr(parts[0], "detach")
        if tensor:
            import torch

            vec = parts[0] if len(parts) == 1 else torch.cat(parts, -1)
        else:
            vec = np.ascontiguousarray(parts[0]) if len(parts) == 1 else np.concatenate(parts, -1)
        head = heads.get(r) if heads else None
        if head is not None:
            from poolkit.head import apply_head

            vec = apply_head(head, vec, normalize=False)
            vec = vec if tensor else vec.astype(np.float32, copy=False)
        if r.resolved_normalize(model_normalize):
            vec = l2_normalize(vec)
        out[r] = vec
    return _one_copy_to_host(out) if device else out


def _same_width(names: list[str]) -> list[tuple[str, ...]]:
    """``names`` in calls whose parts share one width: the built-in strategies (``H`` wide)
    together, each user pooling (:mod:`poolkit.poolings`, its own width) alone."""
    from poolkit.poolings import is_builtin

    builtin = tuple(n for n in names if is_builtin(n))
    return ([builtin] if builtin else []) + [(n,) for n in names if not is_builtin(n)]


def on_accelerator(x: Any) -> bool:
    """Whether ``x`` is a torch tensor on a device other than the CPU (CUDA, MPS, ...)."""
    return hasattr(x, "detach") and getattr(getattr(x, "device", None), "type", "cpu") != "cpu"


def _one_copy_to_host(vectors: dict[Any, Any]) -> dict[Any, np.ndarray]:
    """Every recipe's ``(B, D_r)`` device tensor brought to the host in one copy: they are
    concatenated on the device, copied once, and split into float32 NumPy views."""
    import torch

    keys = list(vectors)
    widths = [int(vectors[k].shape[-1]) for k in keys]
    host = torch.cat([vectors[k] for k in keys], -1).cpu().numpy()
    cuts = np.cumsum(widths)[:-1]
    return dict(zip(keys, np.split(host, cuts, axis=-1), strict=True))
