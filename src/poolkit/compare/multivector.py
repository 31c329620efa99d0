"""``compare --task retrieval`` rows of multi-vector recipes: exact MaxSim search, MUVERA
search (a dot product over one vector per text), and MUVERA's top 100 reranked by MaxSim
(:func:`multivector_rows`). MaxSim runs in query and document blocks whose token-pair
scores stay within :data:`poolkit.multivector.scoring.PAIR_BUDGET`.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np

from poolkit.compare.fusion import keep_depth, record
from poolkit.compare.search import top_k_by
from poolkit.compare.timing import model_time, timed_depths, timed_search
from poolkit.errors import InputError
from poolkit.multivector.scoring import Ragged, maxsim, ragged

__all__ = ["RERANK", "TokenStates", "check_candidates", "multivector_rows", "shares_forward_pass"]

RERANK = "rescore"  # the key label of a MUVERA row reranked by MaxSim


def check_candidates(
    cands: Sequence[Any], task: str, prompt_name: str | None = None,
    document_prompt_name: str | None = None,
) -> None:  # fmt: skip
    """Multi-vector recipes score retrieval only, at float32 or float16, with queries on the
    query side and documents on the document side, as ``poolkit embed --prompt-name``
    names them (so the row's ``embed`` commands write what it scored)."""
    for c in cands:
        if c.level != "multivector":
            continue
        if prompt_name not in (None, "query"):
            raise InputError(arg="--prompt-name", expected=f"query with the multi-vector recipe "
                             f"{c} (its queries take the query side, which poolkit embed gives "
                             "to --prompt-name query only)", got=repr(prompt_name),
                             fix="Drop it (the folder's query prompt applies).")  # fmt: skip
        if document_prompt_name == "query":
            raise InputError(arg="--document-prompt-name", expected="not 'query' with the "
                             f"multi-vector recipe {c} (its documents take the document side)",
                             got="'query'", fix="Drop it.")  # fmt: skip
        if task != "retrieval":
            raise InputError(arg="--recipes", expected=f"recipes for --task {task}",
                             got=f"{c}, a multi-vector recipe scored by MaxSim",
                             fix="Use it with --task retrieval.")  # fmt: skip
        if c.precision in ("binary", "ubinary"):
            raise InputError(arg="--recipes", expected="float16 or float32 tokens for MaxSim",
                             got=f"{c} (packed bits)")  # fmt: skip


def _slice(r: Ragged, a: int, b: int) -> Ragged:
    start = r.offsets[a]
    return Ragged(r.vectors[start : r.offsets[b]], r.offsets[a : b + 1] - start)


def _search(
    score: Any, n_q: int, n_d: int, depth: int, deep: int, ties: np.ndarray
) -> tuple[Any, Any, float, float]:
    """Top ``max(depth, deep)`` by ``score`` and the seconds to ``depth`` and to that
    (:func:`~poolkit.compare.timing.timed_depths`)."""
    search = partial(top_k_by, score, n_q, n_d, id_order=ties, query_block=64, doc_block=4096)
    (ranked, scores), own, fused = timed_depths(search, depth, deep)
    return ranked, scores, own, fused


def _rerank(top: np.ndarray, qr: Ragged, dr: Ragged, ties: np.ndarray) -> np.ndarray:
    """``top`` ``(Q, k)`` document indices re-ranked by each query's MaxSim score."""
    reranked = np.empty_like(top)
    for q, row in enumerate(top):
        scores = maxsim(_slice(qr, q, q + 1), Ragged(*_gather(dr, row)))[0]
        reranked[q] = row[np.lexsort((-ties[row], -scores))]
    return reranked


class TokenStates:
    """A tap for :func:`poolkit.compare.embedding.embed_sequences`: each text's last-layer
    token vectors ``(tokens, H)`` float32 (every non-padding token, as a plain encoder's
    multi-vector recipe keeps them), by input position, from the dense rows' batches."""

    def __init__(self, n: int) -> None:
        self.vectors: list[Any] = [None] * n

    def __call__(self, batch: Any) -> None:
        from poolkit.driver import to_float32_numpy

        hidden = to_float32_numpy(batch.hidden)
        mask = np.asarray(batch.attention_mask).astype(bool)
        for j, i in enumerate(batch.indices.tolist()):
            self.vectors[i] = hidden[j][mask[j]]


def shares_forward_pass(encoder: Any, settings: Any) -> bool:
    """Whether the dense rows' forward pass gives the multi-vector rows' token vectors: a
    plain encoder (no projection, query expansion, skiplist or side lengths), texts cut at
    the max length (no windows), and each side's prompt the one the dense rows give it."""
    from poolkit.multivector.api import side_prompt
    from poolkit.multivector.encode import late_interaction
    from poolkit.prompts import resolve_prompt

    late = late_interaction(encoder)
    if (
        late.source != "encoder"
        or late.steps
        or getattr(settings, "long_text", "truncate") != "truncate"
    ):
        return False
    for name, side in ((settings.prompt_name, "query"),
                       (getattr(settings, "document_prompt_name", None), "document")):  # fmt: skip
        if (side_prompt(late, name or side, None) or None) != (
            resolve_prompt(encoder.info, name, None) or None
        ):
            return False
    return True


def _tokens(encoder: Any, texts: list[str], side: str, prompt: str | None) -> list[Any]:
    """Each text's token vectors of ``side`` after the folder's projection, not normalised."""
    from poolkit.multivector.encode import iter_token_vectors

    out: list[Any] = [None] * len(texts)
    for batch in iter_token_vectors(encoder, texts, side=side, prompt=prompt, normalize=False):
        for i, vec in zip(batch.indices, batch.vectors, strict=True):
            out[i] = vec
    return out


def _l2(sets: list[Any]) -> list[Any]:
    from poolkit.head import Head, apply_head

    return [np.asarray(apply_head(Head(steps=()), v, normalize=True), np.float32) for v in sets]


def multivector_rows(
    encoder: Any, data: Any, cands: Sequence[Any], settings: Any, depth: int, ties: np.ndarray,
    states: tuple[list[Any], list[Any]] | None = None,
) -> tuple[dict[Any, np.ndarray], dict[Any, dict[str, Any]]]:  # fmt: skip
    """``(ranked, facts)`` by row key: ``c`` (MaxSim, or MUVERA's dot product) and, for a
    MUVERA recipe, ``(c, RERANK)`` (its top ``depth`` reranked by MaxSim of the same recipe
    without ``/muvera``); ranked int64 ``(Q, depth)`` best first. ``states``: the queries'
    and documents' token vectors of the dense rows' forward pass (see
    :func:`shares_forward_pass`); without them each side has a forward pass of its own."""
    from poolkit.multivector.api import check_width, side_prompt
    from poolkit.multivector.encode import finish, late_interaction

    late = late_interaction(encoder)
    q_prompt = side_prompt(late, settings.prompt_name or "query", None)
    d_prompt = side_prompt(late, getattr(settings, "document_prompt_name", None) or "document",
                           None)  # fmt: skip
    per_query = 1000 / max(len(data.queries), 1)
    query_ms = None  # the queries' token pass: the dense rows' when shared
    if states is None:  # one pass a side; L2 per token below where a recipe asks for it
        q_states, seconds = model_time(encoder, lambda: _tokens(encoder, data.queries, "query",
                                                                q_prompt))  # fmt: skip
        query_ms = seconds * per_query
        states = (q_states, _tokens(encoder, data.documents, "document", d_prompt))
    base: dict[bool, tuple[list[Any], list[Any]]] = {False: states}
    ranked: dict[Any, np.ndarray] = {}
    facts: dict[Any, dict[str, Any]] = {}
    for c in cands:
        width = check_width(encoder, c)
        normalize = c.resolved_normalize(late.normalize)
        if normalize not in base:
            base[normalize] = (_l2(states[0]), _l2(states[1]))
        q_tok, d_tok = base[normalize]
        plain = c.replace(muvera=None, precision=None) if c.muvera else c.replace(precision=None)
        q_sets = [finish(v, plain, "query", normalize) for v in q_tok]
        d_sets = [finish(v, plain, "document", normalize) for v in d_tok]
        stored = 2 if c.precision == "float16" else 4
        if c.precision == "float16":  # scored as stored
            q_sets = [v.astype(np.float16).astype(np.float32) for v in q_sets]
            d_sets = [v.astype(np.float16).astype(np.float32) for v in d_sets]
        qr, dr = ragged(q_sets, "queries"), ragged(d_sets, "documents")

        def by_maxsim(q0: int, q1: int, d0: int, d1: int, qr: Ragged = qr, dr: Ragged = dr):
            return maxsim(_slice(qr, q0, q1), _slice(dr, d0, d1))

        if c.muvera is None:
            deep = keep_depth(settings, (c, None), depth)
            ranked[c], scores, own, fused = _search(by_maxsim, len(qr), len(dr), depth, deep,
                                                    ties)  # fmt: skip
            record(settings, (c, None), ranked[c], scores)
            facts[c] = {"dims": width, "search_ms": own * per_query,
                        "fused_search_ms": fused * per_query,
                        "bytes_per_vector": round(dr.lengths.mean() * width * stored)}  # fmt: skip
            _cost(settings, (c, None), query_ms)
            continue
        qm = np.stack([finish(v, c.replace(precision=None), "query", normalize) for v in q_tok])
        dm = np.stack([finish(v, c.replace(precision=None), "document", normalize)
                       for v in d_tok])  # fmt: skip
        if c.precision == "float16":
            qm, dm = (x.astype(np.float16).astype(np.float32) for x in (qm, dm))
        ranked[c], muvera_scores, seconds, fused = _search(
            lambda q0, q1, d0, d1, qm=qm, dm=dm: qm[q0:q1] @ dm[d0:d1].T, len(qm), len(dm),
            depth, keep_depth(settings, (c, None), depth), ties,
        )  # fmt: skip
        record(settings, (c, None), ranked[c], muvera_scores)
        _cost(settings, (c, None), query_ms)
        facts[c] = {"dims": int(dm.shape[1]), "search_ms": seconds * per_query,
                    "fused_search_ms": fused * per_query,
                    "bytes_per_vector": int(dm.shape[1] * stored)}  # fmt: skip
        # reranked: the top ``depth`` (searched deeper when fused)
        reranked, rerank_seconds = timed_search(_rerank, ranked[c][:, :depth], qr, dr, ties)
        seconds += rerank_seconds
        ranked[(c, RERANK)] = reranked
        record(settings, (c, RERANK), reranked)
        _cost(settings, (c, RERANK), query_ms)
        facts[(c, RERANK)] = {"dims": width, "search_ms": seconds * per_query,
                              "bytes_per_vector": int(dm.shape[1] * stored
                                                      + round(dr.lengths.mean() * width * stored))}  # fmt: skip
    return ranked, facts


def _cost(settings: Any, key: Any, query_ms: float | None) -> None:
    """The query time of a multi-vector row: its own query pass (None: the dense rows')."""
    if query_ms is not None and hasattr(settings, "costs"):
        settings.costs[key] = {"query_ms": query_ms}


def _gather(r: Ragged, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The token sets ``rows`` of ``r`` as ``(vectors, offsets)``."""
    lengths = r.lengths[rows]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    vectors = np.concatenate([r.vectors[r.offsets[i] : r.offsets[i + 1]] for i in rows])
    return vectors, offsets
