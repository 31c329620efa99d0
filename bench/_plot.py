"""One chart for the bench scripts: the median of each contender's rounds as a bar, the
spread (min-max) as an error bar, contenders grouped by case. Written with matplotlib's
Agg backend (no display); the docs' speed page shows the PNGs the scripts write."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path


def interval_bars(
    path: str | Path,
    title: str,
    cases: Sequence[tuple[str, Sequence[tuple[str, Sequence[float]]]]],
    unit: str,
) -> None:
    """Write ``path`` (PNG): one row of bars per case, ``cases`` as ``(case label,
    [(contender, samples), ...])``; every case names the same contenders in one order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [name for name, _ in cases[0][1]]
    fig, axes = plt.subplots(len(cases), 1, figsize=(7.5, 1.1 + 0.45 * len(names) * len(cases)),
                             squeeze=False)  # fmt: skip
    for ax, (label, contenders) in zip(axes[:, 0], cases, strict=True):
        med = [statistics.median(s) for _, s in contenders]
        low = [m - min(s) for m, (_, s) in zip(med, contenders, strict=True)]
        high = [max(s) - m for m, (_, s) in zip(med, contenders, strict=True)]
        rows = range(len(contenders))
        ax.barh(rows, med, xerr=[low, high], color="#2a9d8f", ecolor="#264653", capsize=3)
        ax.set_yticks(list(rows), [name for name, _ in contenders])
        ax.invert_yaxis()
        ax.set_title(label, fontsize=9, loc="left")
        ax.tick_params(labelsize=8)
        ax.set_xlim(left=0)
    axes[-1, 0].set_xlabel(f"{unit}: median of interleaved rounds, bar = min-max", fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
