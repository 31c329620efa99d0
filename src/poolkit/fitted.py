"""Fitted transforms of a recipe's output stage: affine maps fitted on a corpus' vectors.

A recipe's ``/TRANSFORM`` segment (``mean/pca128``, ``mean/whiten``, ``mean/whiten256``,
``mean/abtt3``) maps each pooled vector ``x`` (after the model's modules, ``(D,)``) to
``(x - mean) @ matrix`` (``(K,)``), fitted without labels on the texts it is given:

============  =====  ================================================================
transform     K      ``matrix``, from the eigenvectors ``U`` (by falling eigenvalue
                     ``s``) of the fit vectors' covariance
============  =====  ================================================================
``pcaK``      K      ``U[:, :K]``: principal component analysis
``whiten``    D      ``U / sqrt(s)``: BERT-whitening (Su et al. 2021); a direction
                     the fit texts do not vary in (``s`` ~ 0) is set to 0
``whitenK``   K      ``U[:, :K] / sqrt(s[:K])``: whitening, K directions kept
``abttD``     D      ``I - U[:, :D] U[:, :D]^T``: all-but-the-top (Mu & Viswanath 2018),
                     the mean and the top ``D`` directions removed
``projK``     K      trained on labelled pairs, not fitted (:mod:`poolkit.trained`)
============  =====  ================================================================

Where the recipe normalises, the transformed vector is L2-normalised again; ``/DIMS`` and
``/PRECISION`` then apply to it. A :class:`Fit` holds the fitted ``mean`` and ``matrix`` with
what they were fitted for (recipe, model digest) and on (how many texts, their digest), and
is kept as a versioned safetensors file (:meth:`Fit.save`, :func:`load_fit`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from poolkit._errors import value_error
from poolkit.errors import InputError
from poolkit.io.integrity import short_digest
from poolkit.levels import RecipeError

__all__ = [
    "FIT_FORMAT",
    "TRANSFORMS",
    "Fit",
    "FitError",
    "fit_transform",
    "load_fit",
    "load_fits",
    "parse_transform",
    "transform_width",
]

FIT_FORMAT = "poolkit-fit"
FIT_VERSION = 1
TRANSFORMS = ("pca", "whiten", "abtt", "proj")
_SPELLING = re.compile(r"^(pca|whiten|abtt|proj)(\d*)$")
# Directions whose variance is below this share of the largest do not vary in the fit texts
# (float32 vectors' rounding alone gives ~1e-14): whitening sets them to 0.
_RANK_TOLERANCE = 1e-12


class FitError(InputError):
    """A fit that cannot be made or used (too few texts, another model, another width)."""


def parse_transform(text: str) -> str | None:
    """The canonical transform of a lower-cased ``/SEGMENT`` (``pca128``, ``whiten``,
    ``whiten256``, ``abtt3``), else ``None``; ``pca`` and ``abtt`` without a number, or a
    number below 1, are refused naming the form."""
    m = _SPELLING.match(text)
    if m is None:
        return None
    kind, number = m.groups()
    if (kind != "whiten" and not number) or (number and int(number) < 1):
        form = {"pca": "/pcaK with K >= 1, e.g. /pca128", "abtt": "/abttD with D >= 1, e.g. "
                "/abtt3", "whiten": "/whiten or /whitenK with K >= 1",
                "proj": "/projK with K >= 1, e.g. /proj128"}[kind]  # fmt: skip
        raise RecipeError(arg="transform", expected=form, got=f"/{text}",
                          fix="Write the number of directions.")  # fmt: skip
    return f"{kind}{int(number)}" if number else kind


def _split(transform: str) -> tuple[str, int | None]:
    m = _SPELLING.match(transform)
    if m is None:
        value_error("transform", "pcaK, whiten, whitenK or abttD", repr(transform))
    kind, number = m.groups()
    return kind, int(number) if number else None


def transform_width(transform: str, width: int) -> int:
    """Width of the vectors ``transform`` gives from ``width``-wide ones; a ``K`` above
    ``width`` is refused naming both."""
    kind, k = _split(transform)
    if k is not None and k > width and kind != "abtt":
        raise FitError(arg="transform", expected=f"at most {width} directions (the vectors' "
                       "width)", got=f"/{transform}", fix=f"Keep at most {width}, e.g. "
                       f"/{kind}{min(128, width)}.")  # fmt: skip
    if kind == "abtt" and k is not None and k >= width:
        raise FitError(arg="transform", expected=f"fewer than {width} directions removed",
                       got=f"/{transform}", fix="Remove a few, e.g. /abtt3.")  # fmt: skip
    return width if kind == "abtt" or k is None else k


@dataclass(frozen=True, eq=False)
class Fit:
    """A fitted affine transform: ``(x - mean) @ matrix``.

    Attributes:
        transform: canonical transform (``pca128``, ``whiten``, ``abtt3``).
        mean: float32 ``(D,)``, the fit vectors' mean.
        matrix: float32 ``(D, K)``.
        recipe: the recipe it was fitted for, output stage left out (``mean/pca128``).
        model: the model folder's content digest (empty: not recorded).
        texts: how many texts it was fitted on.
        source: what they were (``"5183 documents of corpus.jsonl"``).
        texts_digest: digest of those texts (empty: not recorded).
    """

    transform: str
    mean: np.ndarray
    matrix: np.ndarray
    recipe: str
    model: str = ""
    texts: int = 0
    source: str = ""
    texts_digest: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)

    @property
    def in_dim(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def out_dim(self) -> int:
        return int(self.matrix.shape[1])

    def apply(self, vectors: Any) -> Any:
        """``(N, D)`` float vectors transformed: float32 NumPy ``(N, K)``, each row computed
        alone (no matrix-product blocking across rows), so a vector never depends on the
        others in its batch; a torch tensor stays one (its device and graph; a matrix
        product, as a model module computes it)."""
        if hasattr(vectors, "detach"):
            if vectors.ndim != 2 or vectors.shape[1] != self.in_dim:
                raise FitError(arg="vectors", expected=f"(N, {self.in_dim}) vectors for the "
                               f"fit of {self.recipe!r}", got=f"shape {tuple(vectors.shape)}",
                               fix="Use the fit made for this recipe and model.")  # fmt: skip
            import torch

            mean = torch.as_tensor(self.mean, device=vectors.device, dtype=vectors.dtype)
            matrix = torch.as_tensor(self.matrix, device=vectors.device, dtype=vectors.dtype)
            return (vectors - mean) @ matrix
        v = np.asarray(vectors, dtype=np.float32)
        if v.ndim != 2 or v.shape[1] != self.in_dim:
            raise FitError(arg="vectors", expected=f"(N, {self.in_dim}) vectors for the fit "
                           f"of {self.recipe!r}", got=f"shape {v.shape}",
                           fix="Use the fit made for this recipe and model.")  # fmt: skip
        # einsum without BLAS: a row's sum runs over its own values in one fixed order.
        return np.einsum("nd,dk->nk", v - self.mean, self.matrix, optimize=False)

    def check(self, recipe: str, width: int, model: str = "") -> None:
        """Refuse this fit for ``recipe`` (output stage left out) on vectors of ``width``
        from ``model`` (its digest; empty: not checked) in one line naming both."""
        if self.recipe != recipe:
            raise FitError(arg="fit", expected=f"a fit of {recipe!r}",
                           got=f"a fit of {self.recipe!r}",
                           fix="Pass the fit file made for this recipe.")  # fmt: skip
        if self.in_dim != width:
            raise FitError(arg="fit", expected=f"a fit of {width}-wide vectors ({recipe!r})",
                           got=f"one of {self.in_dim}-wide vectors",
                           fix="Fit again on this model's vectors.")  # fmt: skip
        if model and self.model and model != self.model:
            raise FitError(arg="fit", expected=f"a fit made with this model (digest "
                           f"{short_digest(model)})",
                           got=f"one made with model {short_digest(self.model)}",
                           fix="Fit again with this model (compare writes one), or pass "
                           "the model it was made with.")  # fmt: skip

    def metadata(self) -> dict[str, str]:
        """What the file says beside the arrays (safetensors metadata: strings)."""
        return {
            "format": FIT_FORMAT,
            "version": str(FIT_VERSION),
            "transform": self.transform,
            "recipe": self.recipe,
            "model": self.model,
            "texts": str(self.texts),
            "source": self.source,
            "texts_digest": self.texts_digest,
            **dict(self.extra),
        }

    def save(self, path: str | Path) -> Path:
        """Write the fit to ``path`` (safetensors; atomic: whole or not at all)."""
        from poolkit.io.atomic import atomic_write

        data = _safetensors({"matrix": self.matrix, "mean": self.mean}, self.metadata())
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, lambda f: f.write(data), size=len(data))
        return out

    def digest(self) -> str:
        """XXH3-128 of the arrays: equal transforms, equal digest."""
        from poolkit.io.integrity import fast_digest

        return fast_digest(np.ascontiguousarray(self.mean, np.float32).tobytes()
                           + np.ascontiguousarray(self.matrix, np.float32).tobytes())  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fit) and self.recipe == other.recipe and (
            self.digest() == other.digest())  # fmt: skip

    def __hash__(self) -> int:
        return hash(self.digest())

    def __repr__(self) -> str:
        return (f"Fit({self.recipe!r}, {self.in_dim} -> {self.out_dim}, {self.texts} texts, "
                f"{self.short_digest})")  # fmt: skip

    @property
    def short_digest(self) -> str:
        """The first 12 hex digits of :meth:`digest` (a file name's part)."""
        return short_digest(self.digest())


def _safetensors(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> bytes:
    """float32 ``tensors`` in the safetensors format, its JSON header's keys sorted (the
    library's writer orders metadata at random: equal fits must give equal files)."""
    header: dict[str, Any] = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, offset = [], 0
    for name in sorted(tensors):
        blob = np.ascontiguousarray(tensors[name], "<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(tensors[name])),
                        "data_offsets": [offset, offset + len(blob)]}  # fmt: skip
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


def load_fit(path: str | Path) -> Fit:
    """The :class:`Fit` of a file :meth:`Fit.save` wrote; anything else is refused in one
    line naming the file."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise FitError(arg="fit", expected="a readable fit file", got=f"{p} ({e.strerror})",
                       fix="Pass the file compare or poolkit.fit wrote.") from None  # fmt: skip
    try:
        tensors = load(data)
        header_len = int.from_bytes(data[:8], "little")
        meta = json.loads(data[8 : 8 + header_len]).get("__metadata__") or {}
    except (SafetensorError, ValueError, TypeError) as e:
        raise FitError(arg="fit", expected="a poolkit fit file (safetensors)",
                       got=f"{p}, which is not one ({str(e).splitlines()[0][:80]})",
                       fix="Pass the file compare or poolkit.fit wrote.") from None  # fmt: skip
    if meta.get("format") != FIT_FORMAT or meta.get("version") != str(FIT_VERSION):
        raise FitError(arg="fit", expected=f"a {FIT_FORMAT} file of version {FIT_VERSION}",
                       got=f"{p} (format {meta.get('format')!r}, version "
                       f"{meta.get('version')!r})", fix="Fit again with this poolkit.")  # fmt: skip
    mean, matrix = tensors.get("mean"), tensors.get("matrix")
    if mean is None or matrix is None or mean.ndim != 1 or matrix.ndim != 2 or (
            matrix.shape[0] != mean.shape[0]):  # fmt: skip
        raise FitError(arg="fit", expected="a mean (D,) and a matrix (D, K)",
                       got=f"{p} with {sorted(tensors)}", fix="Fit again.")  # fmt: skip
    known = {"format", "version", "transform", "recipe", "model", "texts", "source",
             "texts_digest"}  # fmt: skip
    texts = str(meta.get("texts", "0") or "0")
    if not texts.isdigit():
        raise FitError(arg="fit", expected="a count of texts in its metadata",
                       got=f"{p} (texts {texts!r})", fix="Fit again.")  # fmt: skip
    return Fit(meta.get("transform", ""), mean, matrix, meta.get("recipe", ""),
               meta.get("model", ""), int(texts), meta.get("source", ""),
               meta.get("texts_digest", ""), {k: v for k, v in meta.items() if k not in known})  # fmt: skip


def load_fits(value: Any) -> dict[str, Fit]:
    """``fit=`` as fits by the recipe each is made for: a :class:`Fit`, a fit file's path,
    or a list (or mapping) of them; two fits of one recipe are refused."""
    if value is None:
        return {}
    items = list(value.values()) if isinstance(value, Mapping) else (
        list(value) if isinstance(value, list | tuple) else [value])  # fmt: skip
    out: dict[str, Fit] = {}
    for item in items:
        if isinstance(item, str | Path):
            item = load_fit(item)
        if not isinstance(item, Fit):
            from poolkit._errors import type_error

            type_error("fit", "a Fit, a fit file's path, or a list of them",
                       type(item).__name__)  # fmt: skip
        if item.recipe in out:
            raise FitError(arg="fit", expected="one fit per recipe",
                           got=f"two fits of {item.recipe!r}", fix="Keep one.")  # fmt: skip
        out[item.recipe] = item
    return out


def fit_transform(
    vectors: Any,
    transform: str,
    *,
    recipe: str,
    model: str = "",
    source: str = "",
    texts_digest: str = "",
) -> Fit:
    """Fit ``transform`` on float ``(N, D)`` ``vectors`` (the recipe's vectors of the fit
    texts, before the output stage); see the module docstring. In float64; eigenvectors
    signed so that each one's largest entry is positive (the same vectors, the same fit)."""
    kind, k = _split(transform)
    if kind == "proj":
        raise FitError(arg="transform", expected="a transform fitted without labels (pcaK, "
                       "whiten[K], abttD)", got=f"/{transform}, which is trained on labels",
                       fix="Train it on labelled pairs: compare --task sts --train FILE, or "
                       "poolkit.trained.train_projection.")  # fmt: skip
    x = np.asarray(vectors)
    if x.ndim != 2 or x.dtype.kind != "f" or not len(x):
        value_error("vectors", "float vectors of shape (N, D), N >= 1",
                    f"{x.dtype} of shape {x.shape}")  # fmt: skip
    if not np.isfinite(x).all():
        raise FitError(arg="vectors", expected="finite vectors to fit on", got="NaN or inf",
                       fix="Check the texts fitted on.")  # fmt: skip
    n, width = x.shape
    out = transform_width(transform, width)
    need = (k or 0) + 1 if kind == "abtt" else out + 1
    if n < need:
        raise FitError(arg="fit", expected=f"at least {need} texts to fit /{transform} "
                       f"({'directions' if kind != 'abtt' else 'top directions'} of "
                       f"{width}-wide vectors)", got=f"{n}",
                       fix="Fit on more texts (the corpus' documents, or --fit FILE).")  # fmt: skip
    x64 = np.ascontiguousarray(x, dtype=np.float64)  # one memory order: one summation order
    mean = x64.mean(axis=0)
    centred = x64 - mean
    cov = centred.T @ centred / (n - 1)  # unbiased, as scikit-learn's PCA and Su et al.
    values, vecs = np.linalg.eigh(cov)
    order = np.argsort(values)[::-1]
    values, vecs = np.clip(values[order], 0.0, None), vecs[:, order]
    signs = np.sign(vecs[np.abs(vecs).argmax(axis=0), np.arange(width)])
    vecs = vecs * np.where(signs == 0, 1.0, signs)
    if kind == "pca":
        matrix = vecs[:, :out]
    elif kind == "whiten":
        kept = values[:out]
        # A direction the fit texts do not vary in (all-MiniLM-L6-v2's mean vectors span 381
        # of their 384) would be divided by ~0, blowing float noise up to unit variance: it
        # is set to 0 instead, the width kept.
        varies = kept > values[0] * _RANK_TOLERANCE
        matrix = vecs[:, :out] * np.where(varies, 1 / np.sqrt(np.where(varies, kept, 1)), 0)
    else:
        top = vecs[:, :k]
        matrix = np.eye(width) - top @ top.T
    return Fit(transform, mean.astype(np.float32), np.ascontiguousarray(matrix, np.float32),
               recipe, model, n, source, texts_digest)  # fmt: skip
