"""The candidates ``diagnose`` tries: every way poolkit knows to make a text's vector.

A :class:`Candidate` is one full recipe of a deployment: the pooling (a
:class:`~poolkit.Recipe`: strategy, special tokens, layers, L2, a Matryoshka prefix), whether
the model's modules after pooling (``Dense``, ``LayerNorm``) ran, whether a prefix of unit
vectors was normalised again, the truncation length and the prompt. The pure functions here
list the pooled recipes of one forward pass (:func:`pooled_recipes`) and turn one pooled array
into each vector a deployment could have made from it (:func:`finishes`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from poolkit.driver import l2_normalize
from poolkit.head import Head, apply_head
from poolkit.layers import LAYER_PRESETS, layer_indices
from poolkit.recipe import NO_SPECIAL, Recipe
from poolkit.sequence import SEQUENCE_STRATEGIES

__all__ = ["Candidate", "Finish", "concatenations", "finishes", "pooled_recipes"]

# sentence-transformers' Pooling concatenates its modes in this order; a concatenated
# candidate follows it, so "cls+mean" is tried, not "mean+cls".
ST_ORDER = ("cls", "max", "mean", "mean_sqrt_len", "weighted_mean", "last")


@dataclass(frozen=True)
class Candidate:
    """One way to make a text's vector.

    Attributes:
        recipe: the pooling with ``normalize`` explicit (``/l2`` or ``/raw``) and, for a
            Matryoshka prefix, ``dims``.
        head: the model's modules after pooling (Dense, LayerNorm) were applied; ``None``
            when the model has none (nothing to tell apart).
        renormalized: with ``dims`` and ``/l2``: the prefix was L2-normalised again (what
            ``poolkit embed --recipe mean/128`` does); False: a prefix of unit vectors (what
            sentence-transformers' ``truncate_dim`` gives).
        max_length: tokens per text, special tokens included.
        prompt: the prompt put before each text: a name of the model's prompts, or the text
            of one given to ``diagnose``; ``None``: none.
    """

    recipe: Recipe
    head: bool | None
    renormalized: bool
    max_length: int
    prompt: str | None

    @property
    def name(self) -> str:
        """A compact label: the recipe, then what else differs from a plain run."""
        out = str(self.recipe)
        if self.recipe.dims is not None and self.recipe.normalize and not self.renormalized:
            out += " (prefix not re-normalised)"
        if self.head is False:
            out += " (no Dense/LayerNorm)"
        out += f" @{self.max_length} tokens"
        if self.prompt is not None:
            out += f" prompt={self.prompt!r}"
        return out

    def to_json(self) -> dict[str, Any]:
        rest = ("head", "renormalized", "max_length", "prompt")
        return {
            "name": self.name,
            "recipe": str(self.recipe),
            **{k: getattr(self, k) for k in rest},
        }


@dataclass(frozen=True)
class Finish:
    """What a deployment may do to pooled vectors: ``head`` (None: the model has none),
    L2 ``normalize``, keep the first ``dims`` (None: all), ``renormalized`` after that."""

    head: bool | None
    normalize: bool
    dims: int | None
    renormalized: bool


def pooled_recipes(num_hidden_states: int | None) -> list[Recipe]:
    """Every single-strategy pooling of one forward pass, unnormalised (``/raw``): each
    strategy of :data:`poolkit.SEQUENCE_STRATEGIES`, and ``_no_special`` where that differs
    (not ``cls``: the first token either way), over the last layer and each layer preset the
    model has (``num_hidden_states``: layers + 1; None: last layer only)."""
    names = [*SEQUENCE_STRATEGIES, *(s + NO_SPECIAL for s in SEQUENCE_STRATEGIES if s != "cls")]
    layers: list[str | None] = [None]
    for preset in LAYER_PRESETS:
        if preset == "last" or num_hidden_states is None:
            continue
        if all(-num_hidden_states <= i < num_hidden_states for i in layer_indices(preset)):
            layers.append(preset)
    return [Recipe(s, layers=lay, normalize=False) for lay in layers for s in names]


def concatenations(pooled: dict[Recipe, np.ndarray], parts: int) -> dict[Recipe, np.ndarray]:
    """Last-layer concatenations of ``parts`` strategies in sentence-transformers' order
    (``cls+mean``), from the single pooled arrays ``(N, H)`` of :func:`pooled_recipes`."""
    singles = {r.strategy: v for r, v in pooled.items() if r.layers is None}
    out = {}
    for combo in combinations([s for s in ST_ORDER if s in singles], parts):
        out[Recipe("+".join(combo), normalize=False)] = np.concatenate(
            [singles[s] for s in combo], axis=1
        )
    return out


def finishes(pooled: np.ndarray, head: Head, width: int) -> Iterator[tuple[Finish, np.ndarray]]:
    """Each ``(Finish, (N, width) float32 vectors)`` a deployment can make of ``pooled``
    ``(N, W)`` for vectors ``width`` wide: with and without ``head``'s steps (where they take
    ``W``), raw or L2-normalised, and for ``width`` below the result's, its first ``width``
    dimensions: raw, a prefix of unit vectors, or that prefix normalised again."""
    options: list[bool | None] = [None]
    if head.steps:
        options = [False, True] if head.fits(pooled.shape[1]) else [False]
    for use in options:
        x = apply_head(head, pooled, normalize=False) if use else pooled
        x = np.asarray(x, dtype=np.float32)
        if x.shape[1] == width:
            yield Finish(use, False, None, False), x
            yield Finish(use, True, None, False), l2_normalize(x)
        elif x.shape[1] > width:
            cut = np.ascontiguousarray(x[:, :width])
            yield Finish(use, False, width, False), cut
            yield Finish(use, True, width, False), np.ascontiguousarray(l2_normalize(x)[:, :width])
            yield Finish(use, True, width, True), l2_normalize(cut)
