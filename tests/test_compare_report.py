"""`poolkit compare --report FILE.html`: one self-contained page with every row and command.

Fast: pages rendered from made-up results for every task (escaping, no network reference),
and the real CLI, in process, on a tiny random model and the committed fixtures for every
task: the page's table holds the terminal table's rows cell for cell, the JSON's rows, the
footers, and per row an embed and an export command that the real parsers accept.
Slow: the real CLI as a subprocess on the real model, the page loaded offline in headless
Chromium (Debian's package; skipped without it), the rendered table read back from the DOM
and a screenshot checked to be a non-blank picture.
"""

from __future__ import annotations

import json
import random
import re
import shlex
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from clitools import poolkit, run_cli
from testdata import fixture

from poolkit.compare import report
from poolkit.compare.bootstrap import Paired
from poolkit.compare.html_report import Page, column_order, render
from poolkit.recipe import Recipe

# --- reading a page and a terminal table back ----------------------------------------------


class PageText(HTMLParser):
    """Tables by id (``head``: header cells; ``rows``: body rows of cell texts), list items,
    every ``p.command`` line, the tags and attributes seen, and all the text."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, dict[str, list]] = {}
        self.items: list[str] = []
        self.winners: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._in_head = False
        self._item: list[str] | None = None
        self._winner: list[str] | None = None
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "table":
            self._table = a.get("id") or f"table{len(self.tables)}"
            self.tables[self._table] = {"head": [], "rows": []}
        elif tag == "thead":
            self._in_head = True
        elif tag == "tbody":
            self._in_head = False
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:  # a number's interval, a line below
            self._cell.append(" ")
        elif tag == "li":
            self._item = []
        elif tag == "p" and a.get("class") == "command":
            self._winner = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            key = "head" if self._in_head else "rows"
            if key == "head":
                self.tables[self._table]["head"] = self._row
            else:
                self.tables[self._table]["rows"].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None
        elif tag == "li" and self._item is not None:
            self.items.append("".join(self._item))
            self._item = None
        elif tag == "p" and self._winner is not None:
            self.winners.append("".join(self._winner))
            self._winner = None

    def handle_data(self, data):
        self.text.append(data)
        for part in (self._cell, self._item, self._winner):
            if part is not None:
                part.append(data)


def answer_and_table(stdout: str) -> tuple[list[str], str]:
    """compare's stdout as the answer's lines (it opens with them) and the table after the
    blank line that ends them."""
    answer, table = stdout.split("\n\n", 1)
    return answer.split("\n"), table


def terminal_table(stdout: str, n_rows: int) -> tuple[list[str], list[list[str]], list[str]]:
    """Header cells, row cells and the lines under the table, from compare's stdout (the
    answer before it left out). The dashes line gives each column's extent (cells are
    padded to it, two spaces apart)."""
    lines = answer_and_table(stdout)[1].rstrip("\n").split("\n")
    spans = [m.span() for m in re.finditer(r"-+", lines[1])]

    def split(line: str) -> list[str]:
        return [line[a:b].strip() if j else line[:b].strip() for j, (a, b) in enumerate(spans)]

    return split(lines[0]), [split(x) for x in lines[2 : 2 + n_rows]], lines[2 + n_rows :]


def check_page(markup: str, stdout: str, doc: dict) -> PageText:
    """The page holds the terminal table cell for cell, the JSON's rows in order, every line
    under the table, and an embed and an export cell per row."""
    page = PageText(markup)
    results = doc["results"]
    head, rows, under = terminal_table(stdout, len(results))
    table = page.tables["results-table"]
    metric = doc["metric"]
    # The terminal pads cells; a cell of the page is the same text without padding, its
    # columns in the page's order (vs * and sig beside the main metric).
    order = column_order(head, metric)
    head, rows = [head[j] for j in order], [[r[j] for j in order] for r in rows]
    assert table["head"] == head
    assert [[c.strip() for c in r] for r in table["rows"]] == rows
    for row, cells, res in zip(table["rows"], rows, results, strict=True):
        assert cells[1].split(" (= ")[0].removesuffix(" *") == res["recipe"]
        assert f"{res[metric]:.4f}" in " ".join(row)
    # Every line under the terminal table: the intended note and the facts as list items;
    # the definitions (the terminal's --explain) folded in the page's "How to read" list.
    for line in under:
        if line == report.EXPLAIN_HINT:
            assert 'id="explain"' in markup
        else:
            assert line in page.items, line
    # The answer the terminal opens with is the page's first section, line for line.
    answer, _ = answer_and_table(stdout)
    assert page.items[: len(answer)] == answer
    assert markup.index('id="answer"') < markup.index('id="results-table"')
    commands = page.tables["commands-table"]
    assert commands["head"] == ["#", "recipe", "embed", "export"]
    assert [r[:2] for r in commands["rows"]] == [r[:2] for r in rows]
    best = next(x for x in answer if x.startswith("embed #1 "))
    assert best == f"embed #1 {results[0]['recipe']}: {commands['rows'][0][2]}"
    for (_, _, embed, export), res in zip(commands["rows"], results, strict=True):
        try:
            level = Recipe.parse(res["recipe"]).level
        except ValueError:  # BM25 and hybrid rows: names of compare's own
            continue
        assert res["recipe"] in embed
        if level == "sequence":
            assert_parses("embed", embed, res["recipe"])
            assert_parses("export", export, res["recipe"])
        elif level in ("word", "span"):
            assert embed.startswith("poolkit.embed_") and "export pools whole texts" in export
    return page


def assert_parses(command: str, line: str, recipe: str) -> None:
    """``line`` is a ``poolkit COMMAND`` line the real parser accepts, for ``recipe`` (a
    BEIR folder's: the documents' and the queries' commands joined by ``&&``)."""
    from poolkit.cli import build_parser

    for part in line.split(" && "):
        argv = shlex.split(part)
        assert argv[:2] == ["poolkit", command], line
        args = build_parser().parse_args(argv[1:])
        assert args.recipe in (recipe, [recipe]), line  # embed takes several, export one


# --- pages from made-up results: every task, every shape, escaping -----------------------


def made_up(task: str, rnd: random.Random, boot: bool, quantize: bool) -> list[report.Result]:
    names = report.METRICS[task]
    level = {"ner": "word:", "relation": "span:"}.get(task, "")
    strategies = {"ner": ["first", "mean", "max"], "relation": ["endpoints", "mean", "max"]}.get(
        task, ["mean", "cls", "max", "cls+mean@last4", "mean_no_special"]
    )
    out = []
    for i, s in enumerate(strategies):
        metrics = {n: round(rnd.uniform(0.3, 0.9), 2 if i != 2 else 1) for n in names}
        ci = {n: (v - rnd.uniform(0, 0.1), v + rnd.uniform(0, 0.1)) for n, v in metrics.items()}
        d = rnd.uniform(-0.1, 0.1)
        vs = Paired(d, (d - 0.03, d + 0.03)) if boot and i else None
        out.append(
            report.Result(
                Recipe.parse(level + s), metrics, intended=i == 0 and not level,
                ci=ci if boot else {}, vs_intended=None if level else vs, vs_best=vs,
                members=(Recipe("mean"), Recipe("sum")) if s == "mean" and not level else (),
                quantize="int8" if quantize and i == 1 else None,
                vs_fp32=vs if quantize and i == 1 else None,
            )
        )  # fmt: skip
    return out


HOSTILE = '<script>alert("x")</script> & "quotes" \'single\' <b>bold</b>'


@pytest.mark.parametrize("task", list(report.METRICS))
@pytest.mark.parametrize(("boot", "quantize"), [(True, False), (False, False), (True, True)])
def test_page_holds_the_table_and_escapes_user_text(task, boot, quantize):
    rnd = random.Random(f"{task}{boot}{quantize}")
    results = made_up(task, rnd, boot, quantize)
    bootstrap = report.bootstrap_info(task, 100, 0, 50) if boot else None
    ranked = report.rank(results, report.MAIN_METRIC[task])
    commands = [
        (f"poolkit embed INPUT --recipe {r.recipe} {HOSTILE}", None if i % 2 else HOSTILE, HOSTILE)
        for i, r in enumerate(ranked)
    ]
    page = Page(
        task=task, model=HOSTILE, results=results, bootstrap=bootstrap, data=HOSTILE,
        size=50, unit="units", commands=commands, intended_note=HOSTILE, answer=[HOSTILE],
        notes=[HOSTILE], facts=[(HOSTILE, HOSTILE)],
        versions={"poolkit": "1", HOSTILE: None}, command=HOSTILE,
    )  # fmt: skip
    markup = render(page)
    read = PageText(markup)
    cells = report.cells(task, results, bootstrap)
    table = read.tables["results-table"]
    order = column_order(cells.head, report.METRICS[task][0])
    assert table["head"] == [cells.head[j] for j in order]
    assert table["rows"] == [[row[j] for j in order] for row in cells.rows]
    facts, definitions = report.footer_parts(task, cells.ranked, cells.ties, bootstrap)
    lines = [HOSTILE, HOSTILE, *facts, *definitions]  # the answer, the intended note, ...
    assert lines == read.items[: len(lines)]
    # User text comes back as text: no element of it, and only the page's own tags.
    assert {t for t, _ in read.tags} <= {
        "html", "head", "div", "span", "br", "meta", "title", "style", "body", "main", "h1", "h2", "p", "code",
        "strong", "section", "table", "thead", "tbody", "tr", "th", "td", "ul", "li",
        "figure", "figcaption", "svg", "rect", "line", "text", "g", "circle", "dl", "dt",
        "dd", "footer", "details", "summary", "wbr",
    }  # fmt: skip
    assert "".join(read.text).count(HOSTILE) >= 10
    # Nothing to fetch: no script, no link, no URL but the SVG namespace.
    assert "<script" not in markup.replace("&lt;script", "")
    assert re.findall(r"https?://[^\s\"'<>]+", markup) == ["http://www.w3.org/2000/svg"] * len(
        report.METRICS[task]
    )
    assert not re.search(r"\b(src|href)=|@import|url\(", markup)
    # One error-bar chart per metric, one row (dot) per result; bars only with intervals.
    svgs = re.findall(r"<svg.*?</svg>", markup, flags=re.S)
    assert len(svgs) == len(report.METRICS[task])
    for svg in svgs:
        assert svg.count("<circle") == len(results)
        assert svg.count("<line") >= (3 * len(results) if boot else 0)


# --- the real CLI, in process, on a tiny model: every task ---------------------------------


def _clustering_sample(folder: Path) -> Path:
    lines = fixture("wnut17-entity-type-clustering.csv").read_text(encoding="utf-8").splitlines()
    path = folder / "clusters.csv"
    path.write_text("\n".join([lines[0], *lines[1::6]]) + "\n", encoding="utf-8")
    return path


def _task_args(task: str, folder: Path) -> list[str]:
    return {
        "sts": [str(fixture("stsb-dev-sample.csv")), "--task", "sts", "--layers", "first_last"],
        "classification": [str(fixture("sentiment.txt")), "--task", "classification",
                           "--recipes", "mean", "cls", "max"],
        "clustering": [str(_clustering_sample(folder)), "--task", "clustering",
                       "--recipes", "mean", "cls"],
        "retrieval": [str(fixture("stsb-images-pairs.csv")), "--task", "retrieval",
                      "--recipes", "mean", "sum", "cls", "cls+mean"],
        "ner": [str(fixture("wnut17-dev-sample.conll")), "--task", "ner", "--train",
                str(fixture("wnut17-train-sample.conll")), "--recipes", "word:first", "word:mean"],
        "relation": [str(fixture("relations-dev.txt")), "--task", "relation", "--train",
                     str(fixture("relations-train.txt")), "--recipes", "span:endpoints", "span:mean"],
    }[task]  # fmt: skip


def compare_in_process(folder: Path, *argv: str) -> tuple[int, str, str]:
    result = run_cli(["compare", *argv], cwd=folder)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


@pytest.mark.parametrize("task", list(report.METRICS))
def test_cli_report_matches_the_terminal_table_and_the_json(tmp_path, tiny_dirs, task):
    model = str(tiny_dirs["bert_cls"])
    html_path, json_path = tmp_path / "r.html", tmp_path / "r.json"
    code, stdout, stderr = compare_in_process(
        tmp_path, *_task_args(task, tmp_path), "--model", model, "--bootstrap", "100",
        "--quiet", "--report", str(html_path), "--json", str(json_path),
    )  # fmt: skip
    assert code == 0, stderr
    assert stderr.rstrip().endswith(f"wrote {json_path}; wrote {html_path}"), stderr
    doc = json.loads(json_path.read_text(encoding="utf-8"))
    markup = html_path.read_text(encoding="utf-8")
    page = check_page(markup, stdout, doc)
    facts = "".join(page.text)
    n = len(json.loads(json_path.read_text())["results"])
    assert n == len(page.tables["results-table"]["rows"])
    size = re.search(r"^\S+: (\d+ \w+), ", stderr.splitlines()[-1]).group(1)
    assert size in facts and model in facts and "poolkit compare " in facts
    for package in ("poolkit", "torch", "transformers", "numpy"):
        assert package in [r[0] for r in page.tables["versions-table"]["rows"]]
    if task == "sts":  # merged rows, the intended row, significance: all drawn
        assert any("(= " in r[1] for r in page.tables["results-table"]["rows"])
        head = page.tables["results-table"]["head"]
        assert head[head.index("vs * [95% CI]") + 1] == "sig"


def test_recipes_and_its_old_spelling_score_the_same_rows(tmp_path, tiny_dirs):
    """--strategies, the old spelling of --recipes, gives the same rows; what compare prints
    (the table, the JSON, the page's command) names --recipes either way."""
    model = str(tiny_dirs["bert_cls"])
    runs = []
    for flag in ("--recipes", "--strategies"):
        out = tmp_path / flag.strip("-")
        out.mkdir()
        code, stdout, stderr = compare_in_process(
            tmp_path, str(fixture("sentiment.txt")), "--task", "classification", flag, "mean",
            "cls+mean@first_last", "--model", model, "--bootstrap", "50", "--quiet",
            "--json", str(out / "r.json"), "--report", str(out / "r.html"),
        )  # fmt: skip
        assert code == 0, stderr
        markup = (out / "r.html").read_text(encoding="utf-8")
        doc = json.loads((out / "r.json").read_text(encoding="utf-8"))
        check_page(markup, stdout, doc)
        runs.append((stdout, doc["results"], markup))
    (table, rows, page), (old_table, old_rows, old_page) = runs
    assert sorted(r["recipe"] for r in rows) == ["cls+mean@first_last", "mean"]
    assert (old_table, old_rows) == (table, rows)
    for text in (table, json.dumps(rows), page, old_page):
        assert "--strategies" not in text
    command = f"--recipes mean cls+mean@first_last --bootstrap 50 --model {model}"
    assert page.count(command) == old_page.count(command) == 1


# --- bad --report paths: one line, status 2, nothing written, before the model loads -------


@pytest.mark.parametrize(
    ("argv", "files", "line"),
    [
        (["--report", "r.htm"], {}, "Expected --report to be a .html file name, but got r.htm."),
        (["--report", "r.html"], {"r.html": "old"},
         "--report r.html: file exists; pass --overwrite to replace it."),
        (["--report", "no/such/r.html"], {}, "Expected --report to be a file in an existing folder, but got no/such/r.html, whose folder no/such does not exist."),
    ],
)  # fmt: skip
def test_bad_report_paths_are_one_line(tmp_path, monkeypatch, argv, files, line):
    (tmp_path / "c.txt").write_text("1 a\n0 b\n", encoding="utf-8")
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    code, stdout, stderr = compare_in_process(tmp_path, "c.txt", "--task", "sts", *argv)
    assert (code, stdout, stderr) == (2, "", f"poolkit: error: {line}\n")
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


# --- slow: the real CLI and model, the page in headless Chromium, offline ----------------


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(
        "headless Chromium is not installed (Debian: apt-get install chromium); the "
        "report's browser test needs it"
    )


def run_chromium(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Chromium headless, offline: no sandbox (containers), no GPU, no network features,
    and every host name resolved to nowhere, so that the page can load nothing."""
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-extensions", "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
    ]  # fmt: skip
    return subprocess.run(
        [browser, *flags, *args], capture_output=True, timeout=120, stdin=subprocess.DEVNULL
    )


def pixels(path: Path):
    import matplotlib.image

    return matplotlib.image.imread(str(path))


@pytest.mark.slow
@pytest.mark.parametrize("task", ["sts", "relation"])  # sequence rows; span rows
def test_report_in_headless_chromium(tmp_path, task):
    browser = chromium()
    args = {
        "sts": [str(fixture("stsb-dev-sample.csv")), "--task", "sts", "--layers", "last4"],
        "relation": [str(fixture("relations-dev.txt")), "--task", "relation", "--train",
                     str(fixture("relations-train.txt")), "--recipes", "span:endpoints", "span:mean"],
    }[task]  # fmt: skip
    result = poolkit("compare", *args, "--report", "r.html", "--json", "r.json", "--quiet",
                     cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    stdout = result.stdout.decode()
    doc = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    url = (tmp_path / "r.html").as_uri()
    dom = run_chromium(browser, tmp_path / "profile", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr.decode()[-2000:]
    rendered = dom.stdout.decode()
    assert "results-table" in rendered
    check_page(rendered, stdout, doc)  # every row and command, as the browser built them
    shot = tmp_path / "r.png"
    run = run_chromium(browser, tmp_path / "profile", f"--screenshot={shot}",
                       "--window-size=1280,2000", url)  # fmt: skip
    assert run.returncode == 0 and shot.is_file(), run.stderr.decode()[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = pixels(shot)
    assert image.shape[:2] == (2000, 1280)
    grey = image[..., :3].mean(axis=2)
    assert grey.std() > 0.05, grey.std()  # not one colour: text, table lines, the chart
    assert (grey < 0.5).mean() > 0.002  # dark ink (text) covers part of it
    assert len({tuple(p) for p in image[::8, ::8, :3].reshape(-1, 3).round(2)}) > 8
    if task == "sts":
        reproduce_a_row(tmp_path, PageText(rendered), doc)


def reproduce_a_row(folder: Path, page: PageText, doc: dict) -> None:
    """The last row's embed command, run as the page prints it on each side of the pairs,
    gives back that row's Spearman figure."""
    import numpy as np
    from scipy.stats import spearmanr
    from testdata import read_sts_pairs

    pairs = read_sts_pairs(fixture("stsb-dev-sample.csv"))
    _, _, embed, _ = page.tables["commands-table"]["rows"][-1]
    vectors = []
    for side in (1, 2):
        (folder / f"s{side}.txt").write_text("\n".join(p[side] for p in pairs) + "\n")
        argv = shlex.split(embed)
        argv[argv.index("INPUT")] = f"s{side}.txt"
        argv[argv.index("-o") + 1] = f"s{side}.npy"
        r = poolkit(*argv[1:], "--quiet", cwd=folder)
        assert r.returncode == 0, r.stderr.decode()
        vectors.append(np.load(folder / f"s{side}.npy").astype(np.float64))
    a, b = vectors
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    rho = spearmanr(cos, [p[0] for p in pairs]).statistic
    assert abs(rho - doc["results"][-1]["spearman"]) <= 1e-6, (embed, rho)


def test_vs_and_sig_sit_beside_the_main_metric_on_the_page():
    """At 1280 px the page's table keeps ``vs *`` and ``sig`` in view: they come right after
    the main metric (the other metrics after them), each interval on a line of its own."""
    head = ["#", "recipe", "ndcg_at_10 [95% CI]", "mrr_at_10 [95% CI]", "recall_at_100 [95% CI]",
            "map_at_100 [95% CI]", "vs * [95% CI]", "sig"]  # fmt: skip
    order = column_order(head, "ndcg_at_10")
    assert [head[j] for j in order][:5] == [*head[:3], "vs * [95% CI]", "sig"]
    assert sorted(order) == list(range(len(head)))
    assert column_order(head[:6], "ndcg_at_10") == list(range(6))  # no vs *: as it is
