"""Layer choice: which encoder layers feed the pooling, and how they combine."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from poolkit._arrays import Array, float_hidden
from poolkit._errors import type_error, value_error

LAYER_PRESETS: dict[str, tuple[int, ...]] = {
    "last": (-1,),
    "last4": (-4, -3, -2, -1),
    "first_last": (1, -1),
    "second_last": (-2,),
}
"""Named layer sets. Indices follow ``output_hidden_states``: 0 is the embedding
layer's output, 1 the first transformer layer, -1 the last. ``first_last`` is the
average of the first and the last transformer layer."""

LAYER_COMBINATIONS = ("mean", "sum", "concat")
LAYER_FORMS = f"one of {', '.join(LAYER_PRESETS)} or indices like -1,-2"

LayerSpec = str | tuple[int, ...] | None


def layer_spec(layers: object) -> LayerSpec:
    """``layers`` in its one canonical form: ``None`` for the last layer, a
    ``LAYER_PRESETS`` name, or a tuple of indices.

    Takes ``None``, a preset name, indices as text (``"-1,-2"``, ``"2"``), an int or a
    non-empty sequence of ints. A bad value raises one line about layers only (with the
    closest preset for a mistyped name)."""
    if layers is None:
        return None
    if isinstance(layers, int) and not isinstance(layers, bool):
        layers = (layers,)
    chosen: str | tuple[int, ...]
    if isinstance(layers, str):
        text = layers.strip().lower()
        try:
            chosen = (
                text
                if text in LAYER_PRESETS
                else tuple(int(p) for p in text.split(",") if p.strip())
            )
        except ValueError:
            chosen = ()
        if not chosen:
            close = difflib.get_close_matches(text, LAYER_PRESETS, n=1)
            value_error(
                "layers", LAYER_FORMS, repr(layers), f"Closest: {close[0]}." if close else ""
            )
    elif (
        isinstance(layers, Sequence)
        and layers
        and all(isinstance(i, int) and not isinstance(i, bool) for i in layers)
    ):
        chosen = tuple(int(i) for i in layers)
    else:
        type_error(
            "layers", "None, a preset name, an int or a non-empty list of ints", repr(layers)
        )
    return None if chosen in ("last", (-1,)) else chosen


def layer_indices(layers: object) -> tuple[int, ...]:
    """The layer indices a layer spec selects, as written (negative from the end)."""
    spec = layer_spec(layers) or "last"
    return LAYER_PRESETS[spec] if isinstance(spec, str) else spec


def layer_name(layers: object) -> str:
    """A layer spec as text that :func:`layer_spec` reads back: ``last``, ``last4``, ``-1,-2``."""
    spec = layer_spec(layers) or "last"
    return spec if isinstance(spec, str) else ",".join(map(str, spec))


def resolve_layers(layers: str | int | Sequence[int], n_layers: int) -> tuple[int, ...]:
    """Absolute indices into a stack of ``n_layers`` hidden states (0 = embeddings)."""
    out = []
    for i in layer_indices(layers):
        if not -n_layers <= i < n_layers:
            value_error(
                "layers",
                f"indices in {-n_layers}..{n_layers - 1} ({n_layers} hidden states, 0 = embeddings)",
                repr(i),
            )
        out.append(i % n_layers)
    return tuple(out)


def layer_mix(
    hidden_states: Sequence[Array] | Array,
    layers: str | int | Sequence[int] = "last",
    how: str = "mean",
) -> Array:
    """Choose encoder layers and combine them into one ``hidden`` for pooling.

    Args:
        hidden_states: a sequence of ``(B, L, H)`` (or ``(L, H)``) arrays, as a model's
            ``output_hidden_states=True`` gives them (index 0 = embedding output), or
            one stacked array ``(N, B, L, H)``.
        layers: a preset from ``LAYER_PRESETS`` (``last``, ``last4``, ``first_last``,
            ``second_last``), one index or a list of indices (negative from the end), as
            :func:`layer_spec` reads them (``None``: the last layer).
        how: ``mean`` (accumulated in float32 or wider), ``sum`` or ``concat`` (along H).

    Returns:
        ``(B, L, H)`` (``(B, L, k*H)`` for ``concat`` of k layers), float32 (float64 for
        float64 input), the input's kind and device. Padding positions are combined
        like any other, so NaN/inf propagate here by design; the pooling functions that
        follow ignore padding and raise on NaN/inf in real positions.
    """
    if how not in LAYER_COMBINATIONS:
        value_error("how", f"one of {', '.join(LAYER_COMBINATIONS)}", repr(how))
    states = list(hidden_states) if isinstance(hidden_states, list | tuple) else None
    if states is None:
        xp, _ = float_hidden(hidden_states, "hidden_states")
        states = [hidden_states[i] for i in range(hidden_states.shape[0])]
    if not states:
        value_error("hidden_states", "a non-empty sequence of layers", "an empty one")
    xp, dtype = float_hidden(states[0], "hidden_states")
    shape = tuple(states[0].shape)
    if len(shape) not in (2, 3):
        value_error("hidden_states", "layers of shape (L, H) or (B, L, H)", f"shape {shape}")
    for i, s in enumerate(states):
        if tuple(s.shape) != shape:
            value_error(
                "hidden_states",
                f"layers of one shape {shape}",
                f"layer {i} of shape {tuple(s.shape)}",
            )
    # No copy where the dtype already fits: one layer is returned as it is (never modified).
    chosen = [
        states[i] if states[i].dtype == dtype else xp.astype(states[i], dtype)
        for i in resolve_layers(layers, len(states))
    ]
    if how == "concat":
        return xp.concat(chosen, axis=-1)
    if len(chosen) == 1:
        return chosen[0]
    total = chosen[0] + chosen[1]  # a new array: the sums and the mean go into it in place
    for s in chosen[2:]:
        total += s
    if how == "mean":
        total /= len(chosen)
    return total
