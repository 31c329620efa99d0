"""``poolkit.diagnose``: which pooling made these vectors, and is it the model's own.

One forward pass gives every pooled candidate (:mod:`.space`), each finished every way a
deployment may finish it and scored row by row (:mod:`.agreement`); other truncation
lengths and prompts run only when none matches; the best is set against the model's
intended recipe (:mod:`.verdict`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poolkit._errors import value_error
from poolkit.diagnosis.agreement import Agreement, RowScores, differences, row_scores
from poolkit.diagnosis.space import Candidate, concatenations, finishes, pooled_recipes
from poolkit.diagnosis.verdict import deviations, fix, verdict
from poolkit.encoder import Encoder
from poolkit.encoder_cache import get_encoder
from poolkit.errors import InputError
from poolkit.recipe import Recipe

__all__ = ["TRUNCATION_LENGTHS", "Diagnosis", "check_vectors", "diagnose"]

# The truncation lengths tried beside the model's own (those its positions allow).
TRUNCATION_LENGTHS = (512, 256, 128)
MATCH_SHARE = 0.99  # a candidate "matches" when this share of rows match to `tol`


@dataclass(frozen=True)
class Diagnosis:
    """What :func:`diagnose` found.

    Attributes:
        model: the model reference.
        rows, width: the vectors' shape ``(N, D)``.
        tol: the relative distance within which a row matches.
        best: the candidate that reproduces the vectors (at least 99% of rows match), as an
            :class:`~poolkit.diagnosis.agreement.Agreement`; ``None``: none does.
        equivalent: other candidates that match exactly as many rows (indistinguishable on
            these vectors, e.g. ``mean`` and ``sum`` once normalised).
        nearest: the top-ranked candidate (``best`` when there is one).
        intended: the model's intended :class:`~poolkit.diagnosis.space.Candidate`.
        verdict: one line: ``OK: ...``, ``MISMATCH: ... use `--recipe mean``` or ``NO MATCH: ...``.
        fix: the ``poolkit embed`` flags that give the intended vectors (``""``: none needed).
        differences: with a match, how it differs from the intended recipe; without, what
            separates the vectors from the nearest candidate.
        candidates: every candidate tried, best first.
        notes: what was not tried or cannot be told apart on these texts.
    """

    model: str
    rows: int
    width: int
    tol: float
    best: Agreement | None
    equivalent: tuple[Agreement, ...]
    nearest: Agreement
    intended: Candidate
    verdict: str
    fix: str
    differences: tuple[str, ...]
    candidates: tuple[Agreement, ...] = field(repr=False)
    notes: tuple[str, ...] = ()

    @property
    def matched(self) -> bool:
        """Whether a candidate reproduces the vectors."""
        return self.best is not None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (what ``poolkit diagnose --json`` prints)."""
        plain = ("model", "rows", "width", "tol", "verdict", "fix", "matched")
        return {
            **{k: getattr(self, k) for k in plain},
            "best": self.best.to_json() if self.best else None,
            "equivalent": [a.to_json() for a in self.equivalent],
            "nearest": self.nearest.to_json(),
            "intended": self.intended.to_json(),
            "differences": list(self.differences),
            "notes": list(self.notes),
            "candidates": [a.to_json() for a in self.candidates],
        }

    def to_text(self, top: int = 5) -> str:
        """The human report: the verdict, the best or nearest candidate, the top rows."""
        a = self.best or self.nearest
        lines = [self.verdict, "",
                 f"{'found' if self.best else 'nearest'}:  {a.candidate.name}",
                 f"  {a.matched}/{a.rows} rows match to {self.tol:g}; cosine min "
                 f"{a.cos_min:.6f}, median {a.cos_median:.6f}"]  # fmt: skip
        if self.equivalent:
            same = ", ".join(e.candidate.name for e in self.equivalent[:4])
            more = f" (+{len(self.equivalent) - 4})" if len(self.equivalent) > 4 else ""
            lines.append(f"  the same vectors as: {same}{more}")
        lines.append(f"intended: {self.intended.name}")
        lines += [f"  - {d}" for d in self.differences]
        if self.fix:
            lines.append(f"fix: poolkit embed ... {self.fix}")
        lines += ["", f"{'candidate':<48} {'rows':>11} {'cos min':>9} {'cos median':>10}"]
        for c in self.candidates[:top]:
            lines.append(f"{c.candidate.name:<48} {c.matched:>5}/{c.rows:<5} "
                         f"{c.cos_min:>9.4f} {c.cos_median:>10.4f}")  # fmt: skip
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines)


def check_vectors(vectors: Any, rows: int) -> np.ndarray:
    """``vectors`` as float32 ``(rows, D)``: one finite float row per text, else one line."""
    try:
        arr = np.asarray(vectors)
    except (TypeError, ValueError):
        arr = np.asarray(None)
    if arr.dtype.kind not in "fiu" or arr.ndim != 2 or arr.shape[1] == 0:
        value_error("vectors", "a float array (N, D), one row per text",
                    f"{'dtype ' + str(arr.dtype) if arr.dtype.kind not in 'fiu' else 'shape ' + str(arr.shape)}")  # fmt: skip
    if arr.dtype.kind != "f":
        value_error("vectors", "float vectors", f"dtype {arr.dtype} (quantised?)",
                    "diagnose compares float vectors: pass them before quantisation.")  # fmt: skip
    if arr.shape[0] != rows:
        value_error("vectors", f"one row per text ({rows})", f"{arr.shape[0]} rows",
                    "Pass the vectors the system made for exactly these texts, in order.")  # fmt: skip
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    bad = np.flatnonzero(~np.isfinite(arr).all(axis=1))
    if bad.size:
        value_error("vectors", "finite numbers", f"NaN or inf in row {int(bad[0])}")
    return arr


@dataclass
class _Pass:
    """One forward pass: its prompt (label and text), length, the rows it ran (None: all)
    and every pooled array of those rows."""

    prompt: str | None
    text: str | None
    max_length: int
    rows: np.ndarray | None
    pooled: dict[Recipe, np.ndarray]


class _Search:
    """The passes of one diagnosis and the scores of every candidate."""

    def __init__(self, encoder: Any, texts: list[str], target: np.ndarray, tol: float,
                 progress: Callable[[int], None] | None, max_batch_tokens: int | None) -> None:  # fmt: skip
        self.encoder, self.texts, self.target, self.tol = encoder, texts, target, tol
        self.progress, self.max_batch_tokens = progress, max_batch_tokens
        self.norms = np.linalg.norm(target, axis=1)
        self.tokens = np.zeros(len(texts), dtype=np.int64)
        info = encoder.info
        self.recipes = pooled_recipes(None if info.num_layers is None else info.num_layers + 1)
        self.scores: dict[Candidate, RowScores] = {}
        self.passes: dict[Candidate, _Pass] = {}
        self.order: list[Candidate] = []
        self.main: _Pass | None = None
        self.main_keys: dict[tuple[Any, ...], RowScores] = {}

    def run(self, prompt: str | None, text: str | None, encoder: Any, rows: Any = None) -> None:
        """Pool every candidate over ``rows`` (None: all texts) with ``encoder`` and ``text``
        as the prompt, and score them."""
        from poolkit.embedding import embed_recipes

        texts = self.texts if rows is None else [self.texts[i] for i in rows]
        recipes = self.recipes
        if text and not self.encoder.info.include_prompt:  # see check_prompt_pooling
            recipes = [r for r in recipes if "weighted_mean" not in r.strategy]
        count = self.main is None

        def seen(batch: Any) -> tuple[Any, np.ndarray]:
            if count:
                self.tokens[batch.indices] = batch.num_tokens
            return batch, batch.indices

        pooled, _ = embed_recipes(texts, encoder, {str(r): r for r in recipes}, empty="zeros",
                                  pipeline="pooled", prompt=text or "", progress=self.progress,
                                  max_batch_tokens=self.max_batch_tokens, rows=seen)  # fmt: skip
        arrays = {r: pooled[str(r)] for r in recipes}
        p = _Pass(prompt, text, encoder.max_length, None if rows is None else np.asarray(rows),
                  arrays)  # fmt: skip
        self._score(p)
        if self.main is None:
            self.main = p

    def _arrays(self, p: _Pass) -> dict[Recipe, np.ndarray]:
        width, hidden = self.target.shape[1], self.encoder.info.hidden_size
        out = dict(p.pooled)
        if hidden:
            head_in = self.encoder.head.in_dim
            for k in (2, 3):
                if k * hidden in (width, head_in):
                    out.update(concatenations(p.pooled, k))
        return out

    def _score(self, p: _Pass) -> None:
        width = self.target.shape[1]
        head = self.encoder.head
        target = self.target if p.rows is None else self.target[p.rows]
        norms = self.norms if p.rows is None else self.norms[p.rows]
        for r, arr in self._arrays(p).items():
            for finish, vectors in finishes(arr, head, width):
                recipe = r.replace(normalize=finish.normalize, dims=finish.dims)
                c = Candidate(recipe, finish.head, finish.renormalized, p.max_length, p.prompt)
                scores = row_scores(target, vectors, norms)
                key = (r, finish)
                if p.rows is None:
                    if self.main is None:
                        self.main_keys[key] = scores
                else:  # the other rows are those of the main pass
                    base = self.main_keys[key]
                    rel, cos = base.rel.copy(), base.cos.copy()
                    rel[p.rows], cos[p.rows] = scores.rel, scores.cos
                    scores = RowScores(rel, cos)
                self.scores[c] = scores
                self.passes[c] = p
                self.order.append(c)

    def vectors(self, c: Candidate) -> np.ndarray:
        """The vectors of candidate ``c`` for every text (rebuilt from its pass)."""
        p = self.passes[c]
        recipe = c.recipe.replace(normalize=False, dims=None)
        width = self.target.shape[1]

        def finished(arrays: dict[Recipe, np.ndarray]) -> np.ndarray:
            pooled = self._arrays(_Pass(None, None, 0, None, arrays))[recipe]
            for f, v in finishes(pooled, self.encoder.head, width):
                if (f.head, f.normalize, f.dims, f.renormalized) == (
                        c.head, bool(c.recipe.normalize), c.recipe.dims, c.renormalized):  # fmt: skip
                    return v
            raise AssertionError(c)

        assert self.main is not None
        full = finished(self.main.pooled if p.rows is not None else p.pooled)
        if p.rows is not None:
            full = full.copy()
            full[p.rows] = finished(p.pooled)
        return full

    def ranked(self, intended: Candidate) -> list[Agreement]:
        """Every candidate's agreement: most rows matched first, then closest to the
        intended recipe, then the order tried (mean before sum and mean_sqrt_len, which
        give the same vectors once normalised)."""
        place = {c: i for i, c in enumerate(self.order)}
        found = [Agreement.of(c, self.scores[c], self.tol) for c in self.order]
        width = self.target.shape[1]
        return sorted(found, key=lambda a: (-a.matched, len(deviations(a.candidate, intended,
                                                                       width)),
                                            place[a.candidate]))  # fmt: skip


def _position_limit(encoder: Any) -> int | None:
    """Tokens the model's position embeddings allow (None: not stated)."""
    try:
        cfg = json.loads((encoder.info.path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    from poolkit._config import position_limit

    limit = position_limit(cfg)
    return None if limit is None else limit[0]


def _prompt_options(info: Any, prompts: Sequence[str]) -> list[tuple[str | None, str | None]]:
    """(label, text) of every prompt to try: none, the model's named ones, the user's own."""
    out: list[tuple[str | None, str | None]] = [(None, None)]
    for name, text in sorted(info.prompts.items()):
        if text:
            out.append((name, text))
    for text in prompts:
        if text and all(t != text for _, t in out):
            out.append((text, text))
    return out


def diagnose(
    texts: Sequence[str],
    vectors: Any,
    model: Any = None,
    *,
    prompts: Sequence[str] = (),
    tol: float = 1e-4,
    device: str = "auto",
    dtype: Any = None,
    max_batch_tokens: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> Diagnosis:
    """Infer which pooling recipe produced ``vectors`` for ``texts`` with ``model``.

    Every candidate comes from one forward pass (every layer kept): each sequence strategy,
    with and without special tokens, over the last layer and each layer preset; with and
    without the model's modules after pooling (Dense, LayerNorm); L2-normalised or not;
    Matryoshka prefixes when the vectors are narrower; concatenations (``cls+mean``) when
    wider. When none matches every row, the truncation lengths 512, 256 and 128 (those the
    model allows) run again over the texts they cut differently only, and each of the
    model's prompts (and ``prompts``) gets a pass of its own.

    Args:
        texts: the ``N`` texts the vectors were made for, in order.
        vectors: ``(N, D)`` float vectors some system made for ``texts``.
        model: model directory, hub id or :class:`~poolkit.Encoder` (``None``: the default).
        prompts: prompt texts of your own to try beside the model's named prompts.
        tol: a row matches when its distance to the candidate's is at most ``tol`` times
            the larger of their norms.
        device, dtype, max_batch_tokens: as for :func:`poolkit.embed`.
        progress: called with the texts finished after each batch.

    Returns:
        A :class:`Diagnosis`: the best candidate (or ``None``), its agreement, the verdict
        against the model's intended recipe and the fix.

    Raises:
        InputError: ``vectors`` not ``(N, D)`` floats for the ``N`` texts, or ``D`` wider
            than any candidate of the model.
    """
    from poolkit.embedding import check_inputs

    texts = check_inputs(texts)
    if not texts:
        value_error("texts", "at least one text", "none")
    target = check_vectors(vectors, len(texts))
    if not (isinstance(tol, float | int) and 0 < tol < 1):
        value_error("tol", "a number between 0 and 1", repr(tol))
    prompts = list(prompts)
    if not all(isinstance(p, str) for p in prompts):
        value_error("prompts", "a list of prompt texts", repr(prompts))
    encoder = get_encoder(model, device=device, dtype=dtype, max_batch_tokens=max_batch_tokens)
    info, head = encoder.info, encoder.head
    _check_width(target.shape[1], info, head)
    intended = Candidate(info.intended_recipe(normalize=bool(info.normalize)),
                         True if head.steps else None, False, encoder.max_length,
                         info.default_prompt_name)  # fmt: skip
    search = _Search(encoder, texts, target, tol, progress, max_batch_tokens)
    main_text = info.prompts.get(info.default_prompt_name) if info.default_prompt_name else None
    search.run(info.default_prompt_name, main_text or None, encoder)
    notes: list[str] = []
    first = search.ranked(intended)[0]
    lengths = sorted({n for n in TRUNCATION_LENGTHS if n != encoder.max_length}, reverse=True)
    limit = _position_limit(encoder)
    if first.matched == first.rows:
        notes.append("a candidate of the first pass matched every row: other truncation "
                     "lengths and prompts were not tried")  # fmt: skip
    else:
        for n in lengths:
            if limit is not None and n > limit:
                continue
            cut = np.flatnonzero(search.tokens > min(n, encoder.max_length))
            if cut.size:
                other = Encoder(info.path, backend=encoder.backend, max_length=n,
                                max_batch_tokens=max_batch_tokens)  # fmt: skip
                other.state_cache = getattr(encoder, "state_cache", None)
                search.run(info.default_prompt_name, main_text or None, other, rows=cut)
        for label, text in _prompt_options(info, prompts):
            if label != info.default_prompt_name:
                search.run(label, text, encoder)
    for n in lengths:
        if n < encoder.max_length and search.tokens.max() <= n:
            notes.append(f"no text is longer than {n} tokens: truncation at {n} cannot be "
                         "told apart from the model's own length")  # fmt: skip
    if head.refused:
        notes.append(f"the model's {head.refused[0].module} cannot be applied by poolkit: "
                     "candidates with the whole pipeline are missing")  # fmt: skip
    return _conclude(search, intended, notes, info)


def _check_width(width: int, info: Any, head: Any) -> None:
    hidden = info.hidden_size
    if not hidden:
        return
    widest = max(3 * hidden, head.out_dim(hidden) if head.fits(hidden) else hidden)
    if width > widest:
        raise InputError(arg="vectors", expected=f"at most {widest} wide (model {info.reference!r} pools {hidden}-d "
            "token vectors; 3 strategies concatenated at most)", got=f"{width} columns", fix="Pass the model that made these vectors with --model.")  # fmt: skip


def _conclude(search: _Search, intended: Candidate, notes: list[str], info: Any) -> Diagnosis:
    ranked = search.ranked(intended)
    top = ranked[0]
    width = search.target.shape[1]
    matched = top.fraction >= MATCH_SHARE
    best = top if matched else None
    equivalent = tuple(a for a in ranked[1:] if matched and a.matched == top.matched)
    if best is not None:
        devs = deviations(best.candidate, intended, width)
        fix_flags = fix(best.candidate, intended, devs, info.prompts)
        why = [d.text for d in devs]
        line = verdict(best.candidate, intended, devs, fix_flags, "", 1.0, [])
    else:
        vectors = search.vectors(top.candidate)
        why = differences(search.target, vectors, search.scores[top.candidate], search.tokens,
                          search.tol)  # fmt: skip
        fix_flags = ""
        line = verdict(None, intended, [], "", top.candidate.name, top.cos_median, why)
    return Diagnosis(
        model=info.reference, rows=top.rows, width=width, tol=search.tol, best=best,
        equivalent=equivalent, nearest=top, intended=intended, verdict=line, fix=fix_flags,
        differences=tuple(why), candidates=tuple(ranked), notes=tuple(notes),
    )  # fmt: skip
