"""The modules of a sentence-transformers pipeline after pooling: read once, applied anywhere.

:func:`read_head` reads the modules after ``Pooling`` in ``modules.json`` into a
:class:`Head`; :func:`apply_head` applies it to pooled ``(N, D)`` NumPy arrays or torch
tensors with the same arithmetic; :func:`torch_head` wraps it as a ``torch.nn.Module``.

=================  ==========================================================
``Dense``          ``activation(x @ W.T + b)`` (+ residual when configured);
                   activations: Tanh (the default), Identity, ReLU, GELU,
                   Sigmoid, SiLU, as ``activation_function`` names them
``LayerNorm``      ``(x - mean) / sqrt(var + 1e-5) * w + b`` over the last axis
``Normalize``      L2 normalisation; a *trailing* one is :attr:`Head.normalize`,
                   applied (or not) as the recipe's ``normalize`` says
``Dropout``        nothing: the identity at inference
=================  ==========================================================

Any other module (``Router``, ``CNN``, ``LSTM``, unknown classes...) is kept in
:attr:`Head.refused`, and :meth:`Head.check` raises :class:`~poolkit.errors.PipelineError`
naming it and the way out (``pipeline="pooled"``: the vectors before the modules).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from poolkit.errors import PipelineError

__all__ = ["Head", "PipelineStep", "apply_head", "read_head", "torch_head"]

# The modules that make the pooled vector (the sparse ones: poolkit.sparse).
_INPUT_KINDS = frozenset({"Transformer", "Pooling", "MLMTransformer", "SpladePooling"})
_NORMALIZE, _DENSE, _LAYER_NORM, _DROPOUT = "Normalize", "Dense", "LayerNorm", "Dropout"
_LN_EPS = 1e-5  # torch.nn.LayerNorm's default, which sentence-transformers' LayerNorm uses


def _xp(x: Any) -> Any:
    """The array namespace of ``x``: torch for tensors, else NumPy."""
    if hasattr(x, "detach"):
        import torch

        return torch
    return np


def _erf(xp: Any, x: Any) -> Any:
    if xp is np:
        return np.vectorize(math.erf, otypes=[x.dtype])(x)
    return xp.erf(x)


# activation class name -> f(xp, x); the class as torch names it in Dense's config.
_ACTIVATIONS: dict[str, Callable[[Any, Any], Any]] = {
    "Tanh": lambda xp, x: xp.tanh(x),
    "Identity": lambda xp, x: x,
    "ReLU": lambda xp, x: x * (x > 0),
    "GELU": lambda xp, x: 0.5 * x * (1.0 + _erf(xp, x / math.sqrt(2.0))),
    "Sigmoid": lambda xp, x: 1.0 / (1.0 + xp.exp(-x)),
    "SiLU": lambda xp, x: x * _ACTIVATIONS["Sigmoid"](xp, x),
}


@dataclass(frozen=True)
class PipelineStep:
    """One module of the pipeline, as ``poolkit inspect`` shows it.

    Attributes:
        module: e.g. ``"Dense (2_Dense)"``.
        kind: the sentence-transformers class name, e.g. ``"Dense"``.
        what: what it does, e.g. ``"384 -> 256, Tanh, bias"``.
        status: ``"applied"``, ``"input"`` (Transformer, Pooling), ``"no-op"`` (Dropout)
            or ``"refused: <why>"``.
        in_dim, out_dim: widths of a Dense or LayerNorm (``None`` otherwise).
        activation: Dense activation class name.
        params: NumPy weights (``weight``, ``bias``, ``residual``) once loaded.
    """

    module: str
    kind: str
    what: str
    status: str
    in_dim: int | None = None
    out_dim: int | None = None
    activation: str | None = None
    params: dict[str, np.ndarray] = field(default_factory=dict, compare=False, repr=False)

    @property
    def applied(self) -> bool:
        return self.status == "applied"


@dataclass(frozen=True)
class Head:
    """What comes after pooling in a model's pipeline.

    Attributes:
        pipeline: every module of ``modules.json`` in order, with its status.
        steps: the modules applied to pooled vectors, in order (no trailing Normalize).
        normalize: the pipeline ends with ``Normalize`` (L2) after ``steps``.
        refused: ``pipeline`` entries poolkit cannot apply.
    """

    pipeline: tuple[PipelineStep, ...] = ()
    steps: tuple[PipelineStep, ...] = ()
    normalize: bool = False
    refused: tuple[PipelineStep, ...] = ()

    @property
    def in_dim(self) -> int | None:
        """Width the first sized step takes (``None``: any width, e.g. only Normalize)."""
        return next((s.in_dim for s in self.steps if s.in_dim is not None), None)

    def fits(self, width: int) -> bool:
        """Whether pooled vectors of ``width`` can go through :attr:`steps`."""
        return self.in_dim is None or self.in_dim == width

    def out_dim(self, width: int) -> int:
        """Output width for pooled vectors of ``width`` that :meth:`fits`."""
        return next((s.out_dim for s in reversed(self.steps) if s.out_dim is not None), width)

    def check(self, width: int, recipe: str, reference: str) -> None:
        """Raise :class:`PipelineError` unless pooled ``recipe`` vectors of ``width`` can
        go through the whole pipeline."""
        if self.refused:
            s = self.refused[0]
            raise PipelineError(where=f"Model {reference!r}", expected="a pipeline poolkit can "
                                "apply", got=f"its {s.module} module cannot be applied "
                                f"({s.status.removeprefix('refused: ')})",
                                fix="Pass `pipeline='pooled'` to get the pooled vectors before "
                                "the modules after pooling, on purpose.")  # fmt: skip
        if not self.fits(width):
            first = next(s for s in self.steps if s.in_dim is not None)
            raise PipelineError(arg="recipe", expected=f"{first.in_dim}-d vectors, as the model's "
                                f"{first.module} takes (it was trained on the model's own "
                                "pooling)", got=f"{recipe!r}, which gives {width}-d vectors",
                                fix="Use the model's pooling (no recipe), or pass "
                                "`pipeline='pooled'` for the pooled vectors without the "
                                "modules after pooling.")  # fmt: skip


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _weights(folder: Path) -> dict[str, np.ndarray]:
    """A module's saved tensors as float32 NumPy (safetensors, else a torch pickle)."""
    st = folder / "model.safetensors"
    if st.is_file():
        from safetensors.numpy import load_file

        return {k: np.asarray(v, dtype=np.float32) for k, v in load_file(st).items()}
    pt = folder / "pytorch_model.bin"
    if pt.is_file():
        import torch

        state = torch.load(pt, map_location="cpu", weights_only=True)
        return {k: v.float().numpy() for k, v in state.items()}
    raise PipelineError(
        arg="model",
        expected=f"a pipeline whose module folder {folder} holds model.safetensors or "
        "pytorch_model.bin (the module's weights)",
        got="a folder with neither",
        fix="Restore the file, or pass pipeline='pooled'.",
    )


def _activation(name: Any) -> tuple[str | None, str]:
    """(class name, '') for a known activation, else (None, why it is refused)."""
    if name is None:
        return "Tanh", ""  # sentence-transformers' default when the config names none
    short = str(name).rsplit(".", 1)[-1]
    if str(name).startswith("torch.") and short in _ACTIVATIONS:
        return short, ""
    return None, f"activation {name!r} is not one of {', '.join(_ACTIVATIONS)}"


def token_dense(
    folder: Path, module: str, weights: bool = True, vectors: str = "token_embeddings"
) -> PipelineStep:
    """The ``Dense`` in ``folder`` as a step :func:`apply_head` applies to ``(T, H)`` token
    vectors (``vectors="sentence_embedding"``: to ``(N, D)`` pooled ones), with its weights
    unless not ``weights``. A missing ``module_input_name`` means ``vectors`` (as PyLate
    saves it); status ``"refused: ..."`` for a mapping or activation poolkit cannot apply."""
    cfg = _read_json(folder / "config.json")
    n_in, n_out = int(cfg["in_features"]), int(cfg["out_features"])
    act, why = _activation(cfg.get("activation_function"))
    residual = bool(cfg.get("use_residual", False))
    bias = bool(cfg.get("bias", True))
    source = cfg.get("module_input_name", vectors)
    target = cfg.get("module_output_name") or source
    if source != vectors or target != vectors:
        what_of = "the sentence embedding" if vectors == "sentence_embedding" else repr(vectors)
        why = f"it maps {source!r} to {target!r}, not {what_of}"
    what = f"{n_in} -> {n_out}, {act or cfg.get('activation_function')}"
    what += ", bias" if bias else ", no bias"
    what += ", residual" if residual else ""
    if why:
        return PipelineStep(module, _DENSE, what, f"refused: {why}", n_in, n_out)
    params: dict[str, np.ndarray] = {}
    if weights:
        raw = _weights(folder)
        params["weight"] = raw["linear.weight"]
        if bias:
            params["bias"] = raw["linear.bias"]
        if residual and n_in != n_out:
            params["residual"] = raw["residual.weight"]
        elif residual:
            params["residual"] = np.eye(n_in, dtype=np.float32)
    return PipelineStep(module, _DENSE, what, "applied", n_in, n_out, act, params)


_REFUSED_WHY = {
    "Router": "it routes queries and documents through different modules",
    "Asym": "it routes queries and documents through different modules",
    "CNN": "a convolution over token vectors",
    "LSTM": "a recurrent layer over token vectors",
    "WordWeights": "per-word weights in the pooling",
    "WeightedLayerPooling": "a learned mix of layers before pooling",
}


def read_head(model_dir: str | os.PathLike[str], *, weights: bool = True) -> Head:
    """Read the modules after pooling from a sentence-transformers folder.

    Args:
        model_dir: a model directory; without ``modules.json`` the head is empty.
        weights: load Dense/LayerNorm weights (``False``: describe only, for ``inspect``).

    Returns:
        A :class:`Head`; an empty one (``steps == ()``) changes nothing.

    Raises:
        PipelineError: a Dense/LayerNorm folder without its weights file.
    """
    root = Path(model_dir)
    path = root / "modules.json"
    if not path.is_file():
        return Head()
    pipeline: list[PipelineStep] = []
    for entry in _read_json(path):
        kind = str(entry.get("type", "")).rsplit(".", 1)[-1]
        sub = str(entry.get("path") or "")
        module = f"{kind} ({sub or 'root'})"
        folder = root / sub
        if kind in _INPUT_KINDS:
            pipeline.append(PipelineStep(module, kind, _input_what(kind, folder), "input"))
        elif kind in (_DENSE, _LAYER_NORM) and not (folder / "config.json").is_file():
            why = f"{sub or '.'}/config.json is missing"
            pipeline.append(PipelineStep(module, kind, why, f"refused: {why}"))
        elif kind == _DENSE:
            pipeline.append(token_dense(folder, module, weights, "sentence_embedding"))
        elif kind == _LAYER_NORM:
            dim = int(_read_json(folder / "config.json")["dimension"])
            raw = _weights(folder) if weights else {}
            params = {"weight": raw["norm.weight"], "bias": raw["norm.bias"]} if weights else {}
            what = f"{dim}-d, eps 1e-5"
            pipeline.append(PipelineStep(module, kind, what, "applied", dim, dim, None, params))
        elif kind == _NORMALIZE:
            cfg = _read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
            source = cfg.get("module_input_name", "sentence_embedding")
            why = f"it normalises {source!r}, not the sentence embedding"
            status = "applied" if source == "sentence_embedding" else f"refused: {why}"
            pipeline.append(PipelineStep(module, kind, "L2 normalisation", status))
        elif kind == _DROPOUT:
            pipeline.append(PipelineStep(module, kind, "dropout (identity at inference)", "no-op"))
        else:
            why = _REFUSED_WHY.get(kind, f"poolkit does not know the module {entry.get('type')!r}")
            pipeline.append(PipelineStep(module, kind, why, f"refused: {why}"))
    applied = [s for s in pipeline if s.applied]
    normalize = bool(applied) and applied[-1].kind == _NORMALIZE
    steps = tuple(applied[:-1] if normalize else applied)
    refused = tuple(s for s in pipeline if s.status.startswith("refused"))
    return Head(tuple(pipeline), steps, normalize, refused)


def _input_what(kind: str, folder: Path) -> str:
    if kind == "MLMTransformer":
        return "masked-LM logits"
    if kind != "Pooling" or not (folder / "config.json").is_file():
        return "token vectors" if kind == "Transformer" else "pooling"
    cfg = _read_json(folder / "config.json")
    mode = cfg.get("pooling_mode") or ", ".join(
        k.removeprefix("pooling_mode_")
        for k, v in cfg.items()
        if k.startswith("pooling_mode_") and v
    )
    prompt = "" if cfg.get("include_prompt", True) else ", prompt tokens excluded"
    return f"pooling {mode}{prompt}"


def _l2(xp: Any, x: Any) -> Any:
    norm = (x * x).sum(-1, keepdims=True) ** 0.5 if xp is np else x.norm(dim=-1, keepdim=True)
    return x / (norm.clip(1e-12) if xp is np else norm.clamp_min(1e-12))


def _param(x: Any, value: np.ndarray) -> Any:
    if _xp(x) is np:
        return value.astype(x.dtype, copy=False)
    return _xp(x).from_numpy(value).to(device=x.device, dtype=x.dtype)


def _step(step: PipelineStep, x: Any) -> Any:
    xp = _xp(x)
    p = step.params
    if step.kind == _DENSE:
        y = x @ _param(x, p["weight"]).T
        if "bias" in p:
            y = y + _param(x, p["bias"])
        y = _ACTIVATIONS[step.activation or "Tanh"](xp, y)
        if "residual" in p:
            y = y + x @ _param(x, p["residual"]).T
        return y
    if step.kind == _LAYER_NORM:
        centred = x - x.mean(-1, keepdims=True)  # torch takes keepdims too
        var = (centred * centred).mean(-1, keepdims=True)
        return centred / (var + _LN_EPS) ** 0.5 * _param(x, p["weight"]) + _param(x, p["bias"])
    if step.kind == _NORMALIZE:
        return _l2(xp, x)
    raise AssertionError(step.kind)  # read_head only puts the kinds above in steps


def apply_head(head: Head, x: Any, *, normalize: bool | None = None) -> Any:
    """Apply ``head.steps`` to pooled vectors, then L2-normalise if asked.

    Args:
        head: from :func:`read_head` (with weights).
        x: ``(N, D)`` float NumPy array or torch tensor, ``D == head.in_dim`` when sized.
        normalize: the final L2 normalisation; ``None`` follows ``head.normalize``.

    Returns:
        ``(N, head.out_dim(D))`` of ``x``'s kind and dtype.
    """
    for step in head.steps:
        x = _step(step, x)
    if head.normalize if normalize is None else normalize:
        x = _l2(_xp(x), x)
    return x


def torch_head(head: Head, *, normalize: bool | None = None) -> Any:
    """``head`` as a ``torch.nn.Module`` mapping ``(N, D)`` to ``(N, D_out)``, for export
    (the same arithmetic as :func:`apply_head`; the weights enter a traced graph as constants)."""
    import torch

    class _HeadModule(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return apply_head(head, x, normalize=normalize)

    return _HeadModule()
