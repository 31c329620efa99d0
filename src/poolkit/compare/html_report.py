"""`poolkit compare --report FILE.html`: the results as one self-contained page (:func:`render`):
the table, the intervals as inline SVG, the footers, the data, model, settings and
versions, and each row's ``embed`` and ``export`` commands. Every text from the user is
escaped; no script, no font, no network.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from poolkit.compare.axes import linear_ticks as _ticks
from poolkit.compare.report import METRICS, Cells, Result, cells, footer_parts
from poolkit.io.atomic import atomic_write

__all__ = ["Page", "render", "write_report"]


@dataclass(frozen=True)
class Page:
    """What one report shows.

    ``results`` and ``bootstrap`` as for :func:`poolkit.compare.report.table`;
    ``commands``: per row in rank order, the ``embed`` command (or call), the ``export``
    command (None: the row has none) and, optionally, why it has none; ``answer``: the
    lines the terminal opens with (:func:`poolkit.compare.recommend.answer_lines`), the
    page's first section; ``intended_note``: the line under the table; ``notes``: the
    remarks ``compare`` prints on stderr; ``facts``: (name, value) pairs about the data set,
    the model and the run; ``versions``: package -> version (None: not installed);
    ``limits``: the lines on ``--max-bytes-per-doc`` / ``--max-query-ms``.
    """

    task: str
    model: str
    results: Sequence[Result]
    bootstrap: dict | None
    data: str
    size: int
    unit: str
    commands: Sequence[tuple[str, str | None] | tuple[str, str | None, str]]
    answer: Sequence[str] = ()
    intended_note: str = ""
    notes: Sequence[str] = ()
    facts: Sequence[tuple[str, str]] = ()
    versions: dict[str, str | None] = field(default_factory=dict)
    command: str = ""
    limits: Sequence[str] = ()


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


_CSS = """
:root { color-scheme: light; --ink: #1f2328; --muted: #59636e; --line: #d1d9e0;
  --soft: #f6f8fa; --intended: #c2410c; --other: #0f766e; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff; font: 15px/1.5 system-ui,
  -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1240px; margin: 0 auto; padding: 20px 20px 48px; }
h1 { font-size: 1.6em; margin: 0 0 4px; }
h2 { font-size: 1.2em; margin: 32px 0 8px; border-bottom: 1px solid var(--line);
  padding-bottom: 4px; }
p.lead { color: var(--muted); margin: 0 0 16px; }
code, pre, td.num, .cmd { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas,
  "Liberation Mono", monospace; font-size: 0.86em; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid var(--line); padding: 4px 8px; vertical-align: top; }
th { background: var(--soft); text-align: left; font-weight: 600; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
table.results { font-size: 0.92em; max-width: 100%; }
table.results td:nth-child(2) { overflow-wrap: anywhere; min-width: 11em; }
section#answer { background: #f0fdf4; border: 1px solid #86efac; border-radius: 6px;
  padding: 4px 16px 8px; margin: 12px 0 8px; }
section#answer h2 { border-bottom: none; margin: 8px 0 4px; }
ul.answer { padding-left: 20px; margin: 4px 0; }
ul.answer li { margin: 3px 0; }
ul.answer li.cmd code { overflow-wrap: anywhere; }
details.explain { margin: 8px 0; }
details.explain summary { cursor: pointer; color: var(--muted); }
tr.intended td { background: #fff7ed; }
td.sig-yes { font-weight: 700; color: #9a3412; }
td.sig-no { color: var(--muted); }
ul.footers { padding-left: 20px; margin: 8px 0; }
ul.footers li { margin: 2px 0; }
p.command { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  font-size: 0.86em; background: var(--soft); border: 1px solid var(--line); padding: 6px 10px;
  overflow-wrap: anywhere; }
table.commands td.cmd { white-space: pre-wrap; overflow-wrap: anywhere; max-width: 560px; }
table.commands td.none { color: var(--muted); font-style: italic; }
td.num span.ci { color: var(--muted); font-size: 0.9em; white-space: normal; }
figure { margin: 12px 0 20px; }
figcaption { color: var(--muted); font-size: 0.9em; }
svg { max-width: 100%; height: auto; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 8px 0; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
footer { margin-top: 36px; color: var(--muted); font-size: 0.85em; }
@media print { main { max-width: none; padding: 0; } h2 { break-after: avoid; } }
"""


def render(page: Page) -> str:
    """The report as one HTML document (a string)."""
    c = cells(page.task, page.results, page.bootstrap)
    metric = METRICS[page.task][0]
    title = f"poolkit compare --task {page.task}: {page.data}"
    facts, definitions = footer_parts(page.task, c.ranked, c.ties, page.bootstrap)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        # Nothing may load from elsewhere: no scripts, no fonts, no images but data: URIs.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">",
        f"<title>{_e(title)}</title>",
        f"<style>{_CSS}</style>",
        "</head>",
        "<body>",
        "<main>",
        f"<h1>poolkit compare: {_e(page.task)}</h1>",
        '<p class="lead">'
        f"{_e(page.size)} {_e(page.unit)} from <code>{_e(page.data)}</code>; "
        f"model <code>{_e(page.model)}</code>; {len(c.rows)} rows, best first by "
        f"<strong>{_e(metric)}</strong>. All scores are fractions.</p>",
        *_answer(page.answer),
        '<section id="results">',
        "<h2>Results</h2>",
        _table(c, metric),
        '<ul class="footers">',
        *(f"<li>{_e(line)}</li>" for line in [page.intended_note, *facts, *page.limits] if line),
        "</ul>",
        *_explain(definitions),
        "</section>",
        *_frontier_section(page, c),
        '<section id="intervals">',
        "<h2>Intervals</h2>",
        *_figures(page, c),
        "</section>",
        '<section id="commands">',
        "<h2>Reproduce a row</h2>",
        "<p>For your own texts: <code>INPUT</code> is a file of texts as "
        "<code>poolkit embed</code> reads it (.txt, .jsonl, .csv, .tsv, .parquet). "
        "<code>embed</code> writes the vectors this row scored; <code>export</code> writes "
        "the model with this row's pooling as a folder other runtimes load.</p>",
        _commands(page, c),
        "</section>",
    ]
    if page.notes:
        out += [
            '<section id="notes">',
            "<h2>Notes</h2>",
            '<ul class="footers">',
            *(f"<li>{_e(n)}</li>" for n in page.notes),
            "</ul>",
            "</section>",
        ]
    out += [
        '<section id="run">',
        "<h2>Data, model and versions</h2>",
        '<dl class="facts">',
        *(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in page.facts),
        "</dl>",
    ]
    if page.command:
        out.append(f'<p>The comparison itself:</p><p class="command">{_e(page.command)}</p>')
    if page.versions:
        out += [
            '<table id="versions-table" class="versions">',
            "<thead><tr><th>package</th><th>version</th></tr></thead>",
            "<tbody>",
            *(
                f'<tr><td>{_e(k)}</td><td class="num">{_e(v or "not installed")}</td></tr>'
                for k, v in page.versions.items()
            ),
            "</tbody>",
            "</table>",
        ]
    out += [
        "</section>",
        "<footer>Written by <code>poolkit compare --report</code>; one file, no scripts, "
        "nothing loaded from the network.</footer>",
        "</main>",
        "</body>",
        "</html>",
        "",
    ]
    return "\n".join(x for x in out if x != "")


def _answer(lines: Sequence[str]) -> list[str]:
    """The answer section, first on the page: each line of the terminal's answer, a row's
    command (``embed #N NAME: COMMAND``) with the command as code."""
    if not lines:
        return []
    items = []
    for line in lines:
        head, sep, command = line.partition(": ")
        if line.startswith("embed #") and sep:
            items.append(f'<li class="cmd">{_e(head)}: <code>{_e(command)}</code></li>')
        else:
            items.append(f"<li>{_e(line)}</li>")
    return ['<section id="answer">', "<h2>What to store</h2>", '<ul class="answer">', *items,
            "</ul>", "</section>"]  # fmt: skip


def _explain(lines: Sequence[str]) -> list[str]:
    """The table's definitions (the terminal's ``--explain``), folded away."""
    if not lines:
        return []
    return ['<details class="explain" id="explain"><summary>How to read this table</summary>',
            '<ul class="footers">', *(f"<li>{_e(x)}</li>" for x in lines), "</ul>",
            "</details>"]  # fmt: skip


def write_report(path: Path, page: Page) -> None:
    """Write :func:`render`'s page to ``path`` atomically (UTF-8)."""
    data = render(page).encode("utf-8")
    atomic_write(Path(path), lambda f: f.write(data), size=len(data))


def column_order(head: list[str], metric: str) -> list[int]:
    """The page's column order: the terminal table's, with ``vs *`` and ``sig`` moved
    right after the main metric, so that they stay in view on a laptop screen (1280 px)
    whatever the other metrics take."""
    order = list(range(len(head)))
    moved = [j for j, h in enumerate(head) if h.startswith("vs *") or h == "sig"]
    main = next((j for j, h in enumerate(head) if h.split(" ")[0] == metric), None)
    if not moved or main is None:
        return order
    rest = [j for j in order if j not in moved]
    at = rest.index(main) + 1
    return rest[:at] + moved + rest[at:]


def _cell(text: str, num: bool) -> str:
    """A cell's HTML: a number's interval on a line of its own (the column half as wide)."""
    value, bracket, interval = text.partition(" [")
    if num and bracket:
        return f'{_e(value)}<br><span class="ci">[{_e(interval)}</span>'
    return _e(text).replace("|", "|<wbr>")  # index 1M|100M: may wrap after the bar


def _table(c: Cells, metric: str) -> str:
    order = column_order(c.head, metric)
    sig = c.head.index("sig") if "sig" in c.head else -1
    head = "".join(f'<th scope="col">{_e(c.head[j])}</th>' for j in order)
    body = []
    for r, row in zip(c.ranked, c.rows, strict=True):
        tds = []
        for j in order:
            cell, num = row[j], c.numeric[j]
            cls = "num" if num else ""
            if j == sig:
                cls += f" sig-{cell if cell in ('yes', 'no') else 'none'}"
            attr = f' class="{cls.strip()}"' if cls else ""
            tds.append(f"<td{attr}>{_cell(cell, num)}</td>")
        attr = ' class="intended"' if r.intended else ""
        body.append(f"<tr{attr}>{''.join(tds)}</tr>")
    rows = "\n".join(body)
    return (
        f'<table id="results-table" class="results"><thead><tr>{head}</tr>'
        f"</thead><tbody>\n{rows}\n</tbody></table>"
    )


def _commands(page: Page, c: Cells) -> str:
    rows = []
    for i, (row, (embed, export, *why)) in enumerate(zip(c.rows, page.commands, strict=True), 1):
        exp = (
            f'<td class="cmd">{_e(export)}</td>'
            if export
            else f'<td class="none">{_e(why[0] if why and why[0] else "not exported")}</td>'
        )
        rows.append(
            f'<tr id="row-{i}"><td>{_e(row[0])}</td><td><code>{_e(row[1])}</code></td>'
            f'<td class="cmd">{_e(embed)}</td>{exp}</tr>'
        )
    return (
        '<table id="commands-table" class="commands"><thead><tr><th scope="col">#</th>'
        '<th scope="col">recipe</th><th scope="col">embed</th><th scope="col">export</th>'
        "</tr></thead><tbody>\n" + "\n".join(rows) + "\n</tbody></table>"
    )


# ---------------------------------------------------------------------------- the plot


def _frontier_section(page: Page, c: Cells) -> list[str]:
    """The frontier plots (:mod:`poolkit.compare.frontier_plot`): quality against bytes per
    document and against query time, one chart each where some row has that cost."""
    if not any(r.frontier_bytes is not None for r in c.ranked):
        return []
    from poolkit.compare.frontier import COSTS
    from poolkit.compare.frontier_plot import Point, frontier_svg

    metric = METRICS[page.task][0]
    out = ['<section id="frontier">', "<h2>Frontier</h2>",
           f"<p>{_e(metric)} against each cost, one dot per row with its interval; the "
           "rows no other row beats at no more cost are joined and labelled (purple; "
           "orange: *). A dot links to its row's commands.</p>"]  # fmt: skip
    for flag, chart in (("--max-bytes-per-doc", "bytes"), ("--max-query-ms", "query")):
        what, cost_of, unit = COSTS[flag]
        points = []
        for i, (r, row) in enumerate(zip(c.ranked, c.rows, strict=True), 1):
            cost = cost_of(r)
            if cost is None:
                continue
            low, high = r.ci.get(metric, (r.metrics[metric],) * 2)
            on = r.frontier_bytes if chart == "bytes" else r.frontier_query
            points.append(Point(i, row[0], r.label, cost, r.metrics[metric], low, high,
                                bool(on), r.intended))  # fmt: skip
        if not points:
            out.append(f"<p>No row has a {_e(what)} in this run: no {_e(what)} chart.</p>")
            continue
        out += ["<figure>", frontier_svg(points, f"frontier-{chart}", f"{what} ({unit})", metric),
                f"<figcaption>{_e(metric)} against {_e(what)} ({_e(unit)}, log scale); "
                f"{sum(p.frontier for p in points)} rows on the frontier.</figcaption>",
                "</figure>"]  # fmt: skip
    return [*out, "</section>"]


def _figures(page: Page, c: Cells) -> list[str]:
    has_ci = all(r.ci for r in c.ranked) and page.bootstrap is not None
    level = round(100 * page.bootstrap["level"]) if page.bootstrap else 95
    main = METRICS[page.task][0]
    if has_ci:
        what = f"Each row's point value (dot) and its {level}% bootstrap interval (bar)."
    else:
        what = "Point values only: the bootstrap was off (--bootstrap 0), so no intervals."
    if any(r.intended for r in c.ranked):
        what += " Orange: the intended pooling (*); its value is the dashed line."
    if "sig" in c.head:
        what += f" A hollow dot: not significantly different from * on {main} (sig: no)."
    out = [f"<p>{_e(what)}</p>"]
    for name in METRICS[page.task]:
        out.append("<figure>")
        out.append(_svg(c, name, has_ci))
        interval = f" with {level}% intervals" if has_ci else ""
        out.append(
            f"<figcaption>{_e(name)} (fraction){_e(interval)}, best row on top.</figcaption>"
        )
        out.append("</figure>")
    return out


def _svg(c: Cells, name: str, has_ci: bool) -> str:
    ranked = c.ranked
    sig_col = c.head.index("sig") if "sig" in c.head else -1
    labels = [
        f"{row[0]}  {r.label}{' *' if r.intended else ''}"
        for r, row in zip(ranked, c.rows, strict=True)
    ]
    shown = [x if len(x) <= 46 else x[:45] + "\u2026" for x in labels]
    points = [r.metrics[name] for r in ranked]
    lows = [r.ci[name][0] if has_ci else r.metrics[name] for r in ranked]
    highs = [r.ci[name][1] if has_ci else r.metrics[name] for r in ranked]
    lo, hi = min(lows + points), max(highs + points)
    pad = max(0.04 * (hi - lo), 0.005)
    lo, hi = lo - pad, hi + pad
    ticks = _ticks(lo, hi)
    lo, hi = min(lo, ticks[0]), max(hi, ticks[-1])
    left = min(20 + 7.4 * max(len(x) for x in shown), 360)
    width, right, top, row_h = 1120, 24, 12, 26
    plot_w = width - left - right
    height = top + row_h * len(ranked) + 40

    def x(v: float) -> float:
        return left + (v - lo) / (hi - lo) * plot_w

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height:.0f}" '
        f'width="{width}" height="{height:.0f}" role="img" '
        f'aria-label="{_e(name)} per row with intervals" font-family="system-ui, sans-serif" '
        'font-size="12">',
        f'<rect x="0" y="0" width="{width}" height="{height:.0f}" fill="#ffffff"/>',
    ]
    bottom = top + row_h * len(ranked)
    parts += [
        f'<rect x="0" y="{top + row_h * i}" width="{width}" height="{row_h}" fill="#f6f8fa"/>'
        for i in range(0, len(ranked), 2)
    ]
    for t in ticks:
        tx = x(t)
        parts.append(
            f'<line x1="{tx:.1f}" y1="{top}" x2="{tx:.1f}" y2="{bottom}" stroke="#e5e7eb"/>'
            f'<text x="{tx:.1f}" y="{bottom + 16}" text-anchor="middle" fill="#59636e">'
            f"{t:g}</text>"
        )
    parts.append(
        f'<line x1="{left}" y1="{bottom}" x2="{width - right}" y2="{bottom}" stroke="#8c959f"/>'
        f'<text x="{left + plot_w / 2:.1f}" y="{bottom + 34}" text-anchor="middle" '
        f'fill="#1f2328">{_e(name)} (fraction)</text>'
    )
    intended = next((r for r in ranked if r.intended), None)
    if intended is not None:
        ix = x(intended.metrics[name])
        parts.append(
            f'<line x1="{ix:.1f}" y1="{top}" x2="{ix:.1f}" y2="{bottom}" stroke="#c2410c" '
            'stroke-dasharray="4 3"/>'
        )
    for i, (r, row) in enumerate(zip(ranked, c.rows, strict=True)):
        y = top + row_h * i + row_h / 2
        color = "#c2410c" if r.intended else "#0f766e"
        hollow = sig_col >= 0 and row[sig_col] == "no"
        tip = f"{labels[i]}: {r.metrics[name]:.4f}"
        if has_ci:
            tip += f" [{lows[i]:.4f}, {highs[i]:.4f}]"
        parts.append(f"<g><title>{_e(tip)}</title>")
        parts.append(
            f'<text x="{left - 10:.1f}" y="{y + 4:.1f}" text-anchor="end" fill="#1f2328">'
            f"{_e(shown[i])}</text>"
        )
        if has_ci:
            x0, x1 = x(lows[i]), x(highs[i])
            parts.append(
                f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x1:.1f}" y2="{y:.1f}" stroke="{color}" '
                f'stroke-width="2"/><line x1="{x0:.1f}" y1="{y - 6:.1f}" x2="{x0:.1f}" '
                f'y2="{y + 6:.1f}" stroke="{color}" stroke-width="2"/><line x1="{x1:.1f}" '
                f'y1="{y - 6:.1f}" x2="{x1:.1f}" y2="{y + 6:.1f}" stroke="{color}" '
                'stroke-width="2"/>'
            )
        parts.append(
            f'<circle cx="{x(points[i]):.1f}" cy="{y:.1f}" r="5" stroke="{color}" '
            f'stroke-width="2" fill="{"#ffffff" if hollow else color}"/></g>'
        )
    parts.append("</svg>")
    return "".join(parts)
