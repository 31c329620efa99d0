"""Fitted rows of `poolkit compare`: the fit of each recipe with a fitted transform.

A recipe such as ``mean/pca128`` is a budget row of its base (``mean``, :mod:`.budget`): its
vectors are the base row's, transformed. Its fit (:mod:`poolkit.fitted`) is made here, once
per recipe, on texts that are never scored: a retrieval corpus' documents (what an index
holds; never the queries or qrels), else the texts of ``--fit FILE`` or the sentences of
``--train FILE`` (an STS train split: its scores are not read). Each fit is saved as a
safetensors file that ``poolkit embed --fit FILE`` reads, so the printed command writes the
vectors the row scored.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from poolkit._names import file_slug
from poolkit.errors import InputError
from poolkit.fitted import Fit, fit_transform
from poolkit.output import l2_normalize
from poolkit.recipe import Recipe

__all__ = [
    "FitTexts",
    "Fitted",
    "check_fit_source",
    "default_fit_dir",
    "fit_stages",
    "fitted_recipes",
    "own_fits",
]


@dataclass(frozen=True)
class FitTexts:
    """Texts to fit on instead of the task's default, and what they are (``"--fit
    FILE (500 texts)"``)."""

    texts: Sequence[str]
    what: str


@dataclass(frozen=True)
class RetrievalPairs:
    """What a retrieval ``/projK`` row trains on: the train queries' vectors by base
    recipe, their judged ``(query, document)`` pairs ``(P, 2)``, one hard negative per
    query by base recipe (the base row's best-ranked unjudged document; -1: none), and what
    they are (``"qrels/train.tsv (809 queries)"``)."""

    queries: Mapping[Recipe, np.ndarray]
    positives: np.ndarray
    hard: Mapping[Recipe, np.ndarray]
    what: str


@dataclass(frozen=True)
class Fitted:
    """One recipe's fit in this run: the :class:`~poolkit.fitted.Fit`, the file it was
    saved to (None: not saved), the seconds fitting took and what it was fitted on."""

    fit: Fit
    file: Path | None
    seconds: float
    what: str

    def facts(self) -> dict[str, Any]:
        """The row facts (:class:`~poolkit.compare.report.RowFacts`) of a fitted row."""
        return {"fit": self.what,
                "fit_file": None if self.file is None else str(self.file),
                "fit_seconds": self.seconds}  # fmt: skip


def default_fit_dir() -> Path:
    """Where compare saves fits without ``--fits-dir``: ``fits/`` under poolkit's cache
    root (never evicted with the token states)."""
    from poolkit._cache import cache_root

    return cache_root() / "fits"


def fitted_recipes(stages: Mapping[Recipe, Any]) -> dict[Recipe, Recipe]:
    """Each recipe a fit is made for (``mean/pca128``, :attr:`Recipe.fitted`) -> its base
    row, over the budget ``stages`` (:func:`poolkit.compare.budget.plan`)."""
    out: dict[Recipe, Recipe] = {}
    for base, stage in stages.items():
        for r in stage.recipes:
            if r.fitted is not None:
                out.setdefault(r.fitted, base)
    return out


def fit_stages(
    stages: Mapping[Recipe, Any],
    vectors: Mapping[Recipe, np.ndarray],
    what: str,
    texts_digest: str,
    settings: Any,
    pairs: Any = None,
) -> dict[Recipe, Fitted]:
    """The fit of every recipe with a fitted transform in ``stages``, on ``vectors`` (base
    recipe -> the fit texts' float vectors, as the rows' own), each saved under
    ``settings.fit_dir`` (None: not saved) as ``SLUG-DIGEST.safetensors``. ``what``:
    the fit texts, for the report. A trained transform (``/projK``, :mod:`poolkit.trained`)
    trains on ``pairs``: STS, ``(a, b, gold, what)`` (the rows of ``vectors`` of each pair's
    sides, the gold scores); retrieval, a :class:`RetrievalPairs`. Seeded by
    ``settings.seed``."""
    from poolkit.trained import train_projection, train_retrieval_projection

    out: dict[Recipe, Fitted] = {}
    model = getattr(settings, "fit_model", "")
    folder = getattr(settings, "fit_dir", None)
    for fitted, base in fitted_recipes(stages).items():
        start = time.perf_counter()
        about = what
        if is_trained(fitted):
            if pairs is None:
                raise InputError(arg="--train", expected=f"labelled pairs to train {fitted} "
                                 "on", got="none", fix="Add --train FILE (a train split "
                                 "with scores).")  # fmt: skip
            how = {"recipe": str(fitted), "model": model, "texts_digest": texts_digest,
                   "seed": getattr(settings, "seed", 0)}  # fmt: skip
            if isinstance(pairs, RetrievalPairs):
                fit = train_retrieval_projection(
                    pairs.queries[base], vectors[base], pairs.positives, pairs.hard[base],
                    str(fitted.transform), source=pairs.what, **how)  # fmt: skip
                about = f"{fit.extra['trained_on']} of {pairs.what}"
            else:
                a, b, gold, about = pairs
                fit = train_projection(vectors[base][a], vectors[base][b], gold,
                                       str(fitted.transform), source=about, **how)  # fmt: skip
                about = f"{fit.extra['trained_on']} of {about.split(' of ', 1)[-1]}"
        else:
            fit = fit_transform(vectors[base], str(fitted.transform), recipe=str(fitted),
                                model=model, source=what, texts_digest=texts_digest)  # fmt: skip
        seconds = time.perf_counter() - start
        file = None
        if folder is not None:
            file = fit.save(Path(folder) / f"{file_slug(fitted)}-{fit.short_digest}.safetensors")
        out[fitted] = Fitted(fit, file, seconds, about)
    return out


def is_trained(recipe: Recipe) -> bool:
    """Whether ``recipe``'s transform is trained on labels (``/projK``), not fitted."""
    return str(recipe.transform or "").startswith("proj")


def own_fits(
    encoder: Any,
    settings: Any,
    vectors: Mapping[Recipe, np.ndarray] | None,
    what: str,
    train: Any = None,
    texts: Sequence[str] = (),
) -> dict[Recipe, Fitted]:
    """The fits of the fitted budget rows, kept in ``settings.fits``: on
    ``settings.fit_texts`` when given, else on the distinct sentences of ``train`` (an STS
    train split; its scores unread), each embedded as the rows are; else on ``vectors``
    (base recipe -> the task's own fit texts' vectors, described by ``what``: a corpus'
    documents; ``texts``: those documents, for the fit's digest). None of these: refused."""
    from poolkit.compare.embedding import SETTINGS_PROMPT, embed_sequences
    from poolkit.io.integrity import texts_digest

    wanted = fitted_recipes(settings.stages)
    if not wanted:
        return {}
    if not settings.fit_model:  # the model the fits are made with, checked where applied
        from poolkit.plan import fit_model

        settings.fit_model = fit_model(encoder)
    digest = texts_digest(list(texts)) if texts else ""
    source = settings.fit_texts
    pairs = None
    if source is None and train is not None and hasattr(train, "sentence1"):
        distinct = list(dict.fromkeys(train.sentence1 + train.sentence2))
        name = getattr(train, "source", "the train split")
        source = FitTexts(distinct, f"{len(distinct)} distinct sentences of {name}")
        where = {t: i for i, t in enumerate(distinct)}
        pairs = (np.array([where[t] for t in train.sentence1], np.int64),
                 np.array([where[t] for t in train.sentence2], np.int64),
                 np.asarray(train.scores, np.float64), f"{len(train)} pairs of {name}")  # fmt: skip
    if source is not None:
        fit_on = list(source.texts)
        vectors, _ = embed_sequences(encoder, fit_on, list(dict.fromkeys(wanted.values())),
                                     settings, "embedding the fit texts",
                                     settings.document_prompt_name
                                     if settings.task == "retrieval" else SETTINGS_PROMPT)  # fmt: skip
        what, digest = source.what, texts_digest(fit_on)
    elif vectors is None:
        raise InputError(arg="fit", expected=f"texts to fit {next(iter(wanted))} on (never the "
                        "texts scored)", got="none", fix="Pass the train split's sentences "
                        "or other unlabelled texts (compare --fit FILE).")  # fmt: skip
    if train is not None and hasattr(train, "qrels") and any(map(is_trained, wanted)):
        pairs = retrieval_pairs(encoder, settings, train, vectors, wanted)
    settings.fits = fit_stages(settings.stages, vectors, what, digest, settings, pairs)
    return settings.fits


def retrieval_pairs(
    encoder: Any,
    settings: Any,
    train: Any,
    documents: Mapping[Recipe, np.ndarray],
    wanted: Mapping[Recipe, Recipe],
) -> RetrievalPairs:
    """What the retrieval ``/projK`` rows train on: ``train`` (the BEIR folder read at its
    train split, the corpus the same) queries embedded as the scored queries are, their
    relevant pairs, and per base recipe each query's hard negative among ``documents``."""
    from poolkit.compare.embedding import embed_sequences

    bases = list(dict.fromkeys(b for r, b in wanted.items() if is_trained(r)))
    queries, _ = embed_sequences(encoder, train.queries, bases, settings,
                                 "embedding the train queries", settings.prompt_name)  # fmt: skip
    judged = train.qrels
    positives = judged[judged[:, 2] > 0][:, :2]
    hard: dict[Recipe, np.ndarray] = {}
    for base in bases:
        scores = l2_normalize(queries[base]) @ l2_normalize(documents[base]).T
        scores[judged[:, 0], judged[:, 1]] = -np.inf  # a judged document is no negative
        best = scores.argmax(axis=1)
        hard[base] = np.where(np.isfinite(scores.max(axis=1)), best, -1)
    what = f"{train.source} ({len(train.queries)} train queries)"
    return RetrievalPairs(queries, positives, hard, what)


def check_fit_source(task: str, named: Sequence[Recipe], fit: str | None, train: str | None,
                     data: str) -> None:  # fmt: skip
    """Before the model loads: a fitted row on ``task`` has texts to fit on that are not
    the texts scored (``fit``: ``--fit FILE``; ``train``: ``--train FILE``; ``data``: DATA),
    refused in one line naming the fix."""
    fitted = [r for r in named if r.transform is not None]
    trained = [r for r in fitted if is_trained(r)]
    if task == "retrieval" and train is not None and not trained:
        raise InputError(arg="--train", expected="given with --task retrieval only for a "
                         "trained row (/projK) among --recipes", got=train,
                         fix="Add one (e.g. mean/proj128), or drop --train.")  # fmt: skip
    if fit is not None and not fitted:
        raise InputError(arg="--fit", expected="given only with a fitted recipe among "
                         "--recipes (e.g. mean/pca128)", got=fit,
                         fix="Add one, or drop --fit.")  # fmt: skip
    if not fitted:
        return
    if fit is not None and Path(fit).resolve() == Path(data).resolve():
        raise InputError(arg="--fit", expected="texts other than those scored (a fit on DATA "
                         "would see the test set)", got=fit,
                         fix="Fit on a train split or an unlabelled sample of your corpus.")  # fmt: skip
    if trained and task not in ("sts", "retrieval"):
        raise InputError(arg="--recipes", expected="trained rows (/projK) with --task sts or "
                         "retrieval (they train on --train's labelled pairs)",
                         got=f"{trained[0]} with --task {task}",
                         fix="Use a fitted row (/pcaK, /whiten[K], /abttD) here.")  # fmt: skip
    if trained and (fit is not None or train is None):
        raise InputError(arg="--train" if train is None else "--fit", expected=f"{trained[0]} "
                         "trained on --train FILE's labelled pairs, without --fit",
                         got="--fit FILE" if fit is not None else "no --train",
                         fix="Pass --train FILE (a train split with scores) and drop --fit.")  # fmt: skip
    if task == "sts" and fit is None and train is None:
        raise InputError(arg="--recipes", expected=f"texts to fit {fitted[0]} on for --task "
                         "sts (never the pairs scored)", got="neither --fit nor --train",
                         fix="Add --train FILE (a train split: its sentences, not its "
                         "scores) or --fit FILE (texts).")  # fmt: skip
