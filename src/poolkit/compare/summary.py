"""From per-row evaluations to :class:`~poolkit.compare.report.Result` rows: point metrics,
bootstrap intervals, and paired comparisons with the intended row, the best row and (for
int8 rows) the full-precision row, all on one shared set of resamples."""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, fields, replace

from poolkit.compare import bootstrap as bs
from poolkit.compare.report import METRICS, Result, RowFacts, rank
from poolkit.recipe import Recipe

__all__ = ["Row", "summarize"]


@dataclass(frozen=True)
class Row(RowFacts):
    """What a result row is: its evaluation ``key``, its ``recipe`` and ``members`` (as
    :class:`~poolkit.compare.report.Result`'s), and ``reference``: the key of the row a
    quantised or budget row is paired with (its full-precision / float32 full-width row).
    """

    key: Hashable
    recipe: Recipe
    members: tuple[Recipe, ...]
    intended: bool = False
    reference: Hashable | None = None


_CARRIED = tuple(f.name for f in fields(RowFacts))  # carried to the Result as they are


def summarize(
    task: str,
    rows: Sequence[Row],
    evaluations: Mapping[Hashable, bs.Evaluation],
    resamples: int = bs.DEFAULT_RESAMPLES,
    seed: int = bs.SEED,
) -> list[Result]:
    """One :class:`Result` per row, in ``rows`` order. ``resamples`` 0: no intervals."""
    names = METRICS[task]
    points = {r.key: dict(zip(names, evaluations[r.key].point(), strict=True)) for r in rows}
    boot = bs.resampled_scores(evaluations, resamples, seed) if resamples else {}
    intended = next((r.key for r in rows if r.intended and r.quantize is None), None)

    def vs(key: Hashable, other: Hashable | None) -> bs.Paired | None:
        if not boot or other is None or other == key:
            return None
        main = names[0]
        return bs.paired(points[key][main], points[other][main], boot[key][:, 0], boot[other][:, 0])

    results = [
        Result(
            r.recipe,
            points[r.key],
            intended=r.intended and r.quantize is None,
            ci={n: bs.interval(boot[r.key][:, j]) for j, n in enumerate(names)} if boot else {},
            vs_intended=vs(r.key, intended),
            members=r.members,
            vs_fp32=vs(r.key, r.reference),
            **{name: getattr(r, name) for name in _CARRIED},
        )
        for r in rows
    ]
    if not boot:
        return results
    key_of = {id(res): r.key for res, r in zip(results, rows, strict=True)}
    best = key_of[id(rank(results, names[0])[0])]
    return [replace(res, vs_best=vs(key_of[id(res)], best)) for res in results]
