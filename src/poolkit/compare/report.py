"""Results of `poolkit compare`: the ranked table, the JSON file and the bar chart."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# One atomic writer for the package: temporary file, fsync, rename (never half a file).
from poolkit.compare.candidates import layers_label
from poolkit.io.atomic import atomic_write
from poolkit.recipe import Recipe

__all__ = [
    "MAIN_METRIC",
    "METRICS",
    "Result",
    "rank",
    "table",
    "to_json",
    "write_json",
    "write_plot",
]

# Every metric per task, the main one (ranking key) first. All are fractions.
METRICS: dict[str, tuple[str, ...]] = {
    "sts": ("spearman", "pearson"),
    "classification": ("accuracy", "macro_f1"),
    "ner": ("entity_f1", "token_accuracy"),
    "relation": ("macro_f1", "accuracy"),
}
MAIN_METRIC = {task: names[0] for task, names in METRICS.items()}


@dataclass(frozen=True)
class Result:
    """One candidate's scores: ``metrics`` maps each name of ``METRICS[task]`` to a fraction.

    ``recipe`` is the candidate; ``str(recipe)`` is the row's name, which
    ``poolkit embed --recipe`` takes to write the vectors that were scored.
    """

    recipe: Recipe
    metrics: dict[str, float]
    intended: bool = False

    @property
    def label(self) -> str:
        return str(self.recipe)

    @property
    def strategy(self) -> str:
        return self.recipe.strategy

    @property
    def layers(self) -> str:
        return layers_label(self.recipe)


def rank(results: Sequence[Result], metric: str) -> list[Result]:
    """Best first by ``metric``; ties keep the candidates' given order (deterministic)."""
    return sorted(results, key=lambda r: -r.metrics[metric])


def table(task: str, results: Sequence[Result], *notes: str) -> str:
    """The terminal table: one row per candidate named by its recipe, best first, ``*`` on
    the intended pooling; then each of ``notes`` on its own line."""
    names = METRICS[task]
    ranked = rank(results, names[0])
    head = ["#", "recipe", *names]
    rows = [
        [str(i), r.label + (" *" if r.intended else ""), *(f"{r.metrics[n]:.4f}" for n in names)]
        for i, r in enumerate(ranked, 1)
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    numeric = [False] * (len(head) - len(names)) + [True] * len(names)

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if num or j == 0 else c.ljust(w)
            for j, (c, w, num) in enumerate(zip(cells, widths, numeric, strict=True))
        ).rstrip()

    out = [line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)]
    out.extend(note for note in notes if note)
    return "\n".join(out)


def to_json(task: str, model: str, results: Sequence[Result]) -> dict:
    """``{"task", "model", "metric", "results": [{"recipe", "strategy", "layers", <metrics>,
    "intended"}]}``, results best first; ``recipe`` is the row's name (``Recipe.parse`` it)."""
    metric = MAIN_METRIC[task]
    return {
        "task": task,
        "model": model,
        "metric": metric,
        "results": [
            {
                "recipe": r.label,
                "strategy": r.strategy,
                "layers": r.layers,
                **{n: r.metrics[n] for n in METRICS[task]},
                "intended": r.intended,
            }
            for r in rank(results, metric)
        ],
    }


def write_json(path: Path, document: dict) -> None:
    """Write ``document`` as indented JSON to ``path`` atomically."""

    data = (json.dumps(document, indent=2) + "\n").encode("utf-8")
    atomic_write(Path(path), lambda f: f.write(data), size=len(data))


def write_plot(path: Path, task: str, model: str, results: Sequence[Result]) -> None:
    """A horizontal bar chart (PNG) of the main metric per candidate, best on top.

    The intended pooling is drawn in another colour; each bar carries its value.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    metric = MAIN_METRIC[task]
    ranked = rank(results, metric)[::-1]  # barh draws bottom-up; best ends on top
    values = [r.metrics[metric] for r in ranked]
    labels = [r.label + ("  (intended)" if r.intended else "") for r in ranked]
    colors = ["#d95f02" if r.intended else "#1b9e77" for r in ranked]
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.32 * len(ranked)), dpi=120)
    try:
        bars = ax.barh(range(len(ranked)), values, color=colors)
        ax.set_yticks(range(len(ranked)), labels)
        ax.bar_label(bars, labels=[f"{v:.4f}" for v in values], padding=3, fontsize=8)
        low = min(0.0, *values)
        high = max(values)
        # Start the axis near the worst score so small differences stay visible.
        start = max(low, min(values) - 0.15 * (high - min(values) + 1e-9) - 0.02)
        ax.set_xlim(start, high + 0.12 * (high - start + 1e-9))
        ax.set_ylim(-0.6, len(ranked) - 0.4)
        ax.set_xlabel(f"{metric} (fraction)")
        ax.set_title(f"poolkit compare --task {task}\n{model}", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        atomic_write(Path(path), lambda f: fig.savefig(f, format="png"))
    finally:
        plt.close(fig)
