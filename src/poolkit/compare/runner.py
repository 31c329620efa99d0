"""`poolkit compare`: one forward pass per data file, every candidate derived per batch and
scored by the task's protocol (cosine + correlation for ``sts``, logistic-regression probes
for the others); hidden states never outlive their batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poolkit.compare import bootstrap as bs
from poolkit.compare import budget as budgets
from poolkit.compare import clustering, metrics, probes, retrieval
from poolkit.compare import documents as docrows
from poolkit.compare.budget import BUDGET_TASKS, Budget, Stage
from poolkit.compare.candidates import candidates, default_strategies
from poolkit.compare.cost import priced
from poolkit.compare.datasets import (
    DataError,
    PairData,
    SpanPairData,
    TaggedData,
    TaskData,
    TextData,
)
from poolkit.compare.embedding import embed_sequences, progress
from poolkit.compare.evaluation import LabelEval, PairEval, TagEval
from poolkit.compare.fits import own_fits
from poolkit.compare.grouping import groups
from poolkit.compare.hybrid import HybridError, default_hybrids, row_keys, split_hybrids
from poolkit.compare.hybrid import evaluations as hybrid_evaluations
from poolkit.compare.hybrid import plan as fuse_plan
from poolkit.compare.multivector import RERANK
from poolkit.compare.multivector import check_candidates as check_multivector
from poolkit.compare.report import Result
from poolkit.compare.sparse_rows import (
    check_extra_rows,
    embed_rows,
    score_extra_rows,
    split_extra,
)
from poolkit.compare.summary import Row, summarize
from poolkit.compare.timing import TimedEncoder
from poolkit.driver import LayerViews, drive
from poolkit.output import bytes_per_vector
from poolkit.recipe import Recipe

__all__ = ["LEVELS", "Settings", "compare", "planned_rows"]

LEVELS = {
    "sts": "sequence", "classification": "sequence", "ner": "word", "relation": "span",
    "retrieval": "sequence", "clustering": "sequence",
}  # fmt: skip


@dataclass
class Settings:
    """What to compare and how.

    ``strategies``: recipe names or :class:`Recipe` values, ``layers``: layer specs (None:
    the level's defaults); ``folds``: stratified CV folds without a training file;
    ``quiet``: no progress bars; ``long_text``: ``"truncate"`` or ``"window"`` for sequence
    tasks (word and span tasks always use windows); ``notes``: filled with remarks for the
    user; ``bootstrap``:
    resamples (0: none) drawn with ``seed``; ``backend``: the rows' ``backend`` field beside
    a quantised model; ``int8_rows``: ``"intended"`` or ``"all"`` rows get a quantised twin;
    ``prompt_name`` / ``document_prompt_name``: before every text (retrieval: query) /
    retrieval document; ``budget``: budget rows (:mod:`.budget`); ``chunk_tokens``: chunk
    sizes of the document rows (:mod:`.documents`). The other fields are filled by
    :func:`compare` and the scorers.
    """

    task: str
    strategies: Sequence[str | Recipe] | None = None
    layers: Sequence[str] | None = None
    folds: int = 5
    quiet: bool = True
    long_text: str = "truncate"
    notes: list[str] = field(default_factory=list)
    bootstrap: int = bs.DEFAULT_RESAMPLES
    seed: int = bs.SEED
    backend: str | None = None
    int8_rows: str = "intended"
    prompt_name: str | None = None
    document_prompt_name: str | None = None
    budget: Budget | None = None
    stages: dict[Recipe, Stage] = field(default_factory=dict)
    budget_facts: dict[Any, dict[str, Any]] = field(default_factory=dict)
    chunk_tokens: Sequence[int] = ()
    document_base: Recipe | None = None
    hybrids: Sequence[Any] = ()
    keep: dict[Any, int] = field(default_factory=dict)
    rankings: dict[Any, Any] = field(default_factory=dict)
    # Rows of this model a hybrid across models fuses (:mod:`poolkit.compare.models`):
    # row name -> (the hybrid's name, the model's label, depth); ``side_keys``: their keys.
    cross_sides: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    side_keys: dict[str, Any] = field(default_factory=dict)
    costs: dict[Any, Any] = field(default_factory=dict)
    int8_costs: dict[Any, Any] = field(default_factory=dict)  # the --quantize model's
    # Fitted rows (:mod:`.fits`): texts to fit on (None: the task's default), where fits
    # are saved (None: nowhere), the model digest they record; ``fits``: those made.
    fit_texts: Any = None
    fit_train: Any = None  # retrieval: the BEIR folder at its train split (/projK rows)
    fit_dir: Any = None
    fit_model: str = ""
    fits: dict[Any, Any] = field(default_factory=dict)


def compare(
    encoder: Any,
    data: Any,
    settings: Settings,
    train: TaskData | None = None,
    quantized: Any = None,
) -> list[Result]:
    """:func:`planned_rows`, summarized: one :class:`Result` per row, with bootstrap
    intervals unless ``settings.bootstrap`` is 0 (see there for the arguments)."""
    rows, evaluations = planned_rows(encoder, data, settings, train, quantized)
    return summarize(settings.task, rows, evaluations, settings.bootstrap, settings.seed)


def planned_rows(
    encoder: Any,
    data: Any,
    settings: Settings,
    train: TaskData | None = None,
    quantized: Any = None,
) -> tuple[list[Row], dict[Any, bs.Evaluation]]:
    """Score every candidate of ``settings`` on ``data`` (probes trained on ``train`` if
    given, else stratified cross-validation where the task allows it).

    ``quantized``: an int8 Encoder of the same model whose rows are added beside the
    intended row (or every row, ``settings.int8_rows="all"``), paired and timed. Returns one
    :class:`Row` per row in candidate order (rows that cannot differ merged) and every row
    key's per-unit evaluation. Raises :class:`DataError` for data the protocol cannot use.
    """
    level = LEVELS[settings.task]
    # Hybrid rows (retrieval) fuse two rows' rankings (.hybrid); named among the strategies.
    named, hybrids = split_hybrids(settings.strategies)
    hybrids = [*settings.hybrids, *hybrids]
    if hybrids and settings.task != "retrieval":
        raise HybridError(arg="--recipes", expected=f"no hybrid row with --task {settings.task} "
                          "(hybrid rows fuse two rows' rankings)", got=str(hybrids[0]),
                          fix="Use them with --task retrieval.")  # fmt: skip
    # Sparse and BM25 rows (retrieval) are scored on their own path (.sparse_rows).
    strategies, extra = split_extra(named, settings.task)
    intended = encoder.info.intended_recipe() if level == "sequence" else None
    own_sparse = None  # a sparse model's own pooling: its row is the * row
    if intended is not None and intended.kind != "dense":  # a sparse model: its own row
        extra = extra if intended in extra else [intended, *extra]
        own_sparse, intended = intended, None
    check_extra_rows(encoder, extra)  # before any forward pass
    if intended is not None and strategies is None:
        # The model's own pooling always takes part unless the user narrowed the set.
        base = default_strategies("sequence")
        strategies = base if str(intended) in base else (*base, intended)
    cands = candidates(level, strategies, settings.layers) if strategies != [] else []
    if settings.task == "ner" and train is None:
        raise DataError(arg="train", expected="a CoNLL training file for task ner (it trains "
                        "the tagging probe)", got="None")  # fmt: skip
    check_labels(data, train, settings)
    check_multivector(cands, settings.task, settings.prompt_name, settings.document_prompt_name)
    # The intended row: the model's own pooling at the last layer, when it takes part.
    chosen = intended if intended in cands else None
    grouped = groups(cands, settings.task, chosen)
    reps = [g[0] for g in grouped]
    dense = [r for r in reps if r.level != "multivector"]  # MaxSim rows: their own facts
    widths = _plan_budget(encoder, settings, chosen, dense, quantized)
    _plan_documents(encoder, settings, chosen, quantized)
    if settings.task == "retrieval":
        if settings.strategies is None:  # the defaults: the * row fused with BM25, SPLADE
            hybrids += default_hybrids(chosen, extra)
        settings.hybrids = hybrids
        settings.costs = {}
        hybrids = fuse_plan(settings, row_keys(grouped, settings, extra, RERANK))
    score = _SCORERS[settings.task]
    timed = TimedEncoder(encoder)
    evaluations = {
        k if isinstance(k, tuple) else (k, None): e
        for k, e in (score(timed, data, train, reps, settings) if reps else {}).items()
    }
    facts = settings.budget_facts
    rows = [
        Row((g[0], None), g[0], g, intended=g[0] == chosen,
            backend=settings.backend, dims=widths.get(g[0]),
            bytes_per_vector=bytes_per_vector(widths[g[0]], None) if g[0] in widths else None,
            search_ms=facts.get((g[0], None), {}).get("search_ms"),
            seconds=None if quantized is None else timed.seconds)
        if g[0].level != "multivector" else
        Row((g[0], None), g[0], g, backend=settings.backend, **facts[(g[0], None)])
        for g in grouped
    ]  # fmt: skip
    for g in grouped:  # MUVERA's candidates reranked by MaxSim, beside the MUVERA row
        if (g[0], RERANK) in evaluations:
            rows.append(Row((g[0], RERANK), g[0], g, backend=settings.backend, rescore=True,
                            reference=(g[0], None), **facts[(g[0], RERANK)]))  # fmt: skip
    for base, stage in settings.stages.items():
        for r in stage.recipes:
            for kind in ("stored", "rescore"):
                if (r, kind) not in evaluations:
                    continue
                fact = facts.get((r, kind), {})
                dims = stage.dims(r)
                rows.append(
                    Row((r, kind), r, (r,), backend=settings.backend, dims=dims,
                        bytes_per_vector=bytes_per_vector(dims, r.precision),
                        rescore=kind == "rescore", reference=(base, None),
                        search_ms=fact.get("search_ms"),
                        fused_search_ms=fact.get("fused_search_ms"),
                        calibration=fact.get("calibration"),
                        ranges=fact.get("ranges"),
                        **(settings.fits[r.fitted].facts() if r.fitted else {}))
                )  # fmt: skip
    if extra and settings.task != "retrieval":  # another family's dense rows
        for r, e in _score_planned(encoder, data, train, extra, settings).items():
            evaluations[(r, None)] = e
            rows.append(Row((r, None), r, (r,), backend=settings.backend))
    elif extra:
        scored, sparsity = score_extra_rows(encoder, data, extra, settings)
        for r in extra:
            evaluations[(r, None)] = scored[r]
            rows.append(Row((r, None), r, (r,), intended=r == own_sparse,
                            backend=settings.backend, **sparsity.get(r, {})))  # fmt: skip
    base = settings.document_base
    if base is not None:
        window = settings.long_text != "window"
        for label in docrows.labels(settings.chunk_tokens, window, docrows.late_ok(base)):
            if (base, label) in evaluations:
                per_doc = facts.get((base, label), {}).get("vectors_per_document")
                rows.append(Row((base, label), base, (base,), backend=settings.backend,
                                documents=label, vectors_per_document=per_doc))  # fmt: skip
    if hybrids:
        evaluations.update(hybrid_evaluations(hybrids, settings, data))
        rows += [Row((h, None), h, (h,), backend=settings.backend) for h in hybrids]
    if quantized is not None:
        twins = [chosen] if settings.int8_rows == "intended" and chosen else reps
        timed_q = TimedEncoder(quantized)
        # The int8 model's own costs and rankings, kept apart from the float model's (the
        # hybrids fused those already).
        kept = settings.costs, settings.rankings
        settings.costs, settings.rankings = {}, {}
        for c, e in score(timed_q, data, train, twins, settings).items():
            evaluations[(c, "int8")] = e
        settings.int8_costs = settings.costs
        settings.costs, settings.rankings = kept
        speedup = timed.seconds / timed_q.seconds if timed_q.seconds > 0 else None
        for g in grouped:
            if g[0] in twins:
                rows.append(
                    Row((g[0], "int8"), g[0], g,
                        intended=g[0] == chosen, backend=settings.backend, quantize="int8",
                        reference=(g[0], None), speedup=speedup, seconds=timed_q.seconds)
                )  # fmt: skip
    if settings.task == "retrieval":
        rows = priced(rows, settings)
    return rows, evaluations


def _plan_budget(
    encoder: Any, settings: Settings, chosen: Recipe | None, reps: Sequence[Recipe], quantized: Any
) -> dict[Recipe, int]:
    """Fill ``settings.stages`` (before any forward pass: a dims wider than a row's vectors
    fails here); returns every row's float32 width (empty without a budget)."""
    settings.stages = {}
    settings.budget_facts = {}
    budget = settings.budget
    if budget is None:
        return {}
    if settings.task not in BUDGET_TASKS:
        raise DataError(arg="--dims/--precision", expected="given only for --task "
                        f"{' and '.join(BUDGET_TASKS)} (similarity on the stored vectors)",
                        got=f"--task {settings.task}, which scores float vectors")  # fmt: skip
    if quantized is not None:
        raise DataError(arg="--dims/--precision", expected="unset with --quantize int8 (one at "
                        "a time)", got="both", fix="Drop one.")  # fmt: skip
    bases = [chosen] if budget.rows == "intended" and chosen is not None else list(reps)
    settings.stages = budgets.plan(encoder, budget, bases)
    for base in settings.stages:
        if base not in reps:  # a named budget row's base (--recipes mean/256/int8)
            raise DataError(expected=f"{base} itself among the rows --recipes compares (its "
                            "budget rows need it)", got="it is not",
                            fix="Add it to --recipes.")  # fmt: skip
    widths = {base: st.width for base, st in settings.stages.items()}
    for c in reps:
        if c not in widths:
            widths[c] = budgets.row_width(encoder, c)[0]
    return widths


def _plan_documents(encoder: Any, settings: Settings, chosen: Recipe | None, quantized: Any):
    """Set ``settings.document_base`` for ``--chunk-tokens`` (the intended recipe), the
    sizes checked against the model's text room before any forward pass."""
    settings.document_base = None
    if not settings.chunk_tokens:
        return
    if settings.task not in docrows.DOCUMENT_TASKS:
        raise DataError(arg="--chunk-tokens", expected="given only for --task retrieval "
                        "(documents scored by their best chunk)", got=f"--task "
                        f"{settings.task}, which has no documents to chunk")  # fmt: skip
    if quantized is not None:
        raise DataError(arg="--chunk-tokens", expected="unset with --quantize int8 (one at a time)",
                        got="both", fix="Drop one.")  # fmt: skip
    if chosen is None:
        raise DataError(expected="the model's intended pooling "
                        f"({encoder.info.pooling}) among --recipes (--chunk-tokens chunks its "
                        "documents)", got="it is left out", fix="Add it to --recipes.")  # fmt: skip
    settings.chunk_tokens = docrows.check_sizes(encoder, settings.chunk_tokens)
    settings.document_base = chosen


# ---------------------------------------------------------------------------- embedding
# Every level goes through poolkit's one driver loop (poolkit.driver.drive): the vectors
# scored here are the vectors `poolkit embed --recipe NAME` writes for the same texts.


def _fill(out: dict[Recipe, np.ndarray], c: Recipe, rows: Any, vectors: np.ndarray, n: int):
    if c not in out:
        out[c] = np.zeros((n, vectors.shape[-1]), dtype=np.float32)
    out[c][rows] = vectors


def embed_words(
    encoder: Any, data: TaggedData, cands: Sequence[Recipe], settings: Settings, desc: str
) -> dict[Recipe, np.ndarray]:
    """Every word candidate for every word of ``data``: float32 ``(total words, D_c)``,
    sentences in order, words in order. Long sentences run in overlapping windows, so
    every word has sub-tokens unless the tokenizer gives it none (then zeros)."""
    lengths = np.fromiter((len(w) for w in data.words), np.int64, count=len(data))
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    total = int(lengths.sum())
    out: dict[Recipe, np.ndarray] = {}

    def on_batch(batch: Any) -> None:
        n_words = int(lengths[batch.indices].max())
        # Flat destination rows for (row j, word w < lengths[j]) pairs, in that order.
        row_len = lengths[batch.indices]
        keep = np.arange(n_words)[None, :] < row_len[:, None]
        dest = (starts[batch.indices][:, None] + np.arange(n_words)[None, :])[keep]
        views = LayerViews(batch)
        for c in cands:
            vec = c.pool(batch, num_words=n_words, model_normalize=encoder.info.normalize,
                         views=views)  # fmt: skip
            _fill(out, c, dest, vec[keep], total)

    with progress(settings, desc, len(data), "text") as bar:
        drive(encoder, data.words, on_batch, all_layers=any(c.all_layers for c in cands),
              long_text="window", is_split_into_words=True, progress=bar.update)  # fmt: skip
    return out


def embed_span_pairs(
    encoder: Any, data: SpanPairData, cands: Sequence[Recipe], settings: Settings, desc: str
) -> dict[Recipe, np.ndarray]:
    """Every span candidate for ``data``: float32 ``(N, 2 * D_c)``, the two entity vectors
    concatenated (entity 1 first). Long texts run in overlapping windows."""
    rows = data.rows or [f"{data.source}: example {i + 1}" for i in range(len(data))]
    out: dict[Recipe, np.ndarray] = {}

    def on_batch(batch: Any) -> None:
        valid = (batch.attention_mask != 0) & ~batch.special_tokens_mask
        spans = np.stack(
            [_token_spans(batch.offsets[j], valid[j], data.spans[i], rows[i])
             for j, i in enumerate(batch.indices)]
        )  # fmt: skip
        views = LayerViews(batch)
        for c in cands:
            vec = c.pool(batch, spans=spans, model_normalize=encoder.info.normalize, views=views)
            _fill(out, c, batch.indices, vec.reshape(len(batch.indices), -1), len(data))

    with progress(settings, desc, len(data), "text") as bar:
        drive(encoder, data.texts, on_batch, all_layers=any(c.all_layers for c in cands),
              long_text="window", progress=bar.update)  # fmt: skip
    return out


def _token_spans(offsets: np.ndarray, valid: np.ndarray, spans: np.ndarray, where: str):
    """Inclusive token spans ``(2, 2)`` of one example's two character spans.

    ``offsets`` ``(L, 2)``, ``valid`` ``(L,)`` (real, non-special tokens); raises DataError
    naming ``where`` for a span that covers no token.
    """
    from poolkit.embedding import char_to_token_spans

    out = []
    for k, (start, end) in enumerate(spans, 1):
        try:
            out.append(char_to_token_spans(offsets, valid, np.array([[start, end]]))[0])
        except ValueError:
            raise DataError(where=where, expected=f"span {k} [{start}, {end}) to cover a token "
                            "of the text", got="it covers none") from None  # fmt: skip
    return np.stack(out)


def _each(cands: Sequence[Recipe], settings: Settings) -> Iterator[Recipe]:
    with progress(settings, "probes", len(cands), "probe") as bar:
        for c in cands:
            yield c
            bar.update(1)


# ---------------------------------------------------------------------------- scoring

Scores = dict[Recipe, bs.Evaluation]


def _distinct_sentences(data: PairData) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The distinct sentences of ``data`` (each goes through the model once) and, per pair,
    the index of its first and of its second sentence among them: ``(N,)`` int64 each."""
    unique = list(dict.fromkeys(data.sentence1 + data.sentence2))
    where = {t: i for i, t in enumerate(unique)}
    a = np.fromiter((where[t] for t in data.sentence1), np.int64, count=len(data))
    b = np.fromiter((where[t] for t in data.sentence2), np.int64, count=len(data))
    return unique, a, b


def _score_sts(encoder, data: PairData, train, cands, settings: Settings) -> Scores:
    unique, a, b = _distinct_sentences(data)
    vectors, _ = embed_sequences(encoder, unique, cands, settings, f"embedding {data.source}")
    out: dict[Any, bs.Evaluation] = {
        c: PairEval(metrics.cosine_rows(vectors[c][a], vectors[c][b]), data.scores) for c in cands
    }
    # Budget rows: the stored form of each base row's vectors, int8 ranges from them all;
    # fitted rows: their fit made on texts other than the pairs scored.
    fits = own_fits(encoder, settings, None, "", train)
    for base, stage in settings.stages.items():
        for r in stage.recipes:
            fit = fits[r.fitted].fit if r.fitted else None
            stored, floats, cal = budgets.stored(vectors[base], r, stage.normalize, fit=fit)
            sim = budgets.pair_similarity(stored[a], stored[b], r.precision, floats.shape[1])
            out[(r, "stored")] = PairEval(sim, data.scores)
            settings.budget_facts[(r, "stored")] = {
                "calibration": f"{len(unique)} distinct sentences" if cal else None,
                "ranges": cal,
            }
    return out


def _score_planned(encoder, data, train, rows, settings: Settings) -> Scores:
    """Rows of another package's family (dense outputs, :func:`split_extra`) on ``sts`` or
    ``classification``: their family's plan embeds the texts, scored as the dense rows
    are (cosine and correlations; the same probes, folds and splits)."""
    if settings.task == "sts":
        unique, a, b = _distinct_sentences(data)
        vectors = embed_rows(encoder, unique, rows, settings, settings.prompt_name)
        return {r: PairEval(metrics.cosine_rows(vectors[r][a], vectors[r][b]), data.scores)
                for r in rows}  # fmt: skip
    test_x = embed_rows(encoder, data.texts, rows, settings, settings.prompt_name)
    train_x = None if train is None else embed_rows(encoder, train.texts, rows, settings,
                                                    settings.prompt_name)  # fmt: skip
    preds = _probe_all(train_x, train.labels if train else None, test_x, data.labels, rows,
                       settings, data.rows, data.source)  # fmt: skip
    gold = np.asarray(data.labels)
    return {r: LabelEval(gold, np.asarray(p), True) for r, p in preds.items()}


def check_labels(data: TaskData, train: TaskData | None, settings: Settings) -> None:
    """Fail early (before any embedding) on labels a probe cannot use: cross-validation
    needs two labels and two examples of each; training needs two labels."""
    if settings.task == "clustering":
        if len(set(data.labels)) < 2:
            raise DataError(where=data.source, expected="at least two labels for clustering",
                            got="there is one")  # fmt: skip
        return
    if isinstance(data, TextData | SpanPairData):
        if train is None:
            _labels_for_cv(data.labels, data.rows, data.source, settings.folds)
        elif len(set(train.labels)) < 2:
            raise DataError(where=train.source, expected="at least two labels for a probe",
                            got="there is one")  # fmt: skip
    elif isinstance(train, TaggedData) and len({t for s in train.tags for t in s}) < 2:
        raise DataError(where=train.source, expected="at least two tags for a probe",
                        got="there is one")  # fmt: skip


def _labels_for_cv(labels: Sequence[str], rows: Sequence[str], source: str, wanted: int) -> int:
    values, first, counts = np.unique(np.asarray(labels), return_index=True, return_counts=True)
    if len(values) < 2:
        raise DataError(where=source, expected="at least two labels for a probe",
                        got=f"there is one ({values[0]!r})")  # fmt: skip
    single = np.flatnonzero(counts == 1)
    if single.size:
        i = int(first[single[0]])
        raise DataError(where=rows[i] if rows else source, expected=f"at least 2 examples of "
                        f"label {labels[i]!r} for cross-validation", got="it has only this one",
                        fix="Remove it, or pass a training file (`train`).")  # fmt: skip
    return probes.folds_for(labels, wanted)


def _probe_all(
    train_x: dict[Recipe, np.ndarray] | None,
    train_y: Sequence[str] | None,
    test_x: dict[Recipe, np.ndarray],
    test_y: Sequence[str],
    cands: Sequence[Recipe],
    settings: Settings,
    rows: Sequence[str],
    source: str,
) -> dict[Recipe, np.ndarray]:
    """Predictions on the test vectors for each candidate: trained on ``train_x`` or, when it
    is None, out-of-fold from stratified CV (one split shared by all candidates)."""
    if train_x is None:
        folds = _labels_for_cv(test_y, rows, source, settings.folds)
        if folds < settings.folds:
            settings.notes.append(f"{source}: {folds}-fold CV (the rarest label has {folds}).")
        splits = probes.stratified_splits(test_y, folds)
        return {
            c: probes.cv_predict(test_x[c], test_y, folds, splits) for c in _each(cands, settings)
        }
    return {c: probes.fit_predict(train_x[c], train_y, test_x[c]) for c in _each(cands, settings)}


def _embed_texts(encoder, data: TextData, cands, settings: Settings, desc: str):
    return embed_sequences(encoder, data.texts, cands, settings, desc)[0]


def _labelled_scorer(embed_fn, main_first: bool):
    """Scorer for labelled examples: embed DATA (and TRAIN), probe, score accuracy and
    macro-F1, in the task's metric order (``main_first``: accuracy first)."""

    def score(encoder, data, train, cands, settings: Settings) -> Scores:
        test_x = embed_fn(encoder, data, cands, settings, f"embedding {data.source}")
        train_x = None
        if train is not None:
            train_x = embed_fn(encoder, train, cands, settings, f"embedding {train.source}")
        preds = _probe_all(
            train_x, train.labels if train else None, test_x, data.labels, cands, settings,
            data.rows, data.source,
        )  # fmt: skip
        gold = np.asarray(data.labels)
        return {c: LabelEval(gold, np.asarray(p), main_first) for c, p in preds.items()}

    return score


def _score_ner(encoder, data: TaggedData, train: TaggedData, cands, settings: Settings) -> Scores:
    train_x = embed_words(encoder, train, cands, settings, f"embedding {train.source}")
    test_x = embed_words(encoder, data, cands, settings, f"embedding {data.source}")
    train_y = [t for s in train.tags for t in s]
    lengths = np.cumsum([len(s) for s in data.tags])[:-1]
    out: Scores = {}
    for c in _each(cands, settings):
        flat = probes.fit_predict(train_x[c], train_y, test_x[c])
        pred = [list(p) for p in np.split(flat, lengths)]
        out[c] = TagEval(data.tags, pred)
    return out


_SCORERS = {
    "sts": _score_sts,
    "classification": _labelled_scorer(_embed_texts, main_first=True),
    "ner": _score_ner,
    "relation": _labelled_scorer(embed_span_pairs, main_first=False),
    "retrieval": retrieval.score,
    "clustering": clustering.score,
}
