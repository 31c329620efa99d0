"""The ``--report`` page reads like a result: the answer first, the table within a laptop
screen, correct export facts per row, the definitions folded away.

Fast: the real CLI, in process, on a tiny model and the committed BEIR fixture with the
issue's rows (``mean``, BM25, their hybrid, a MaxSim row, a budget row): the page opens
with the terminal's answer, every row's export cell is its real ``poolkit export`` command
(the multi-vector row's too, as ``export --from-compare`` writes it) or why it has none,
no note contradicts a command. Slow: the page in headless Chromium at 1,280 px (Debian's
package; skipped without it; offline, every host name resolved to nowhere): no horizontal
scrolling, the table's right edge and the answer's bottom measured in the browser, and a
1,280 x 800 screenshot with the answer's box in it and nothing cut at its right edge.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from clitools import run_cli
from test_compare_report import PageText, check_page, chromium, pixels, run_chromium

FIXTURE = Path(__file__).parent / "data" / "stsb-images-retrieval"
ROWS = ("mean", "bm25", "rrf(mean,bm25)", "multivector:tokens/l2", "mean/16/int8")
WIDTH, FOLD = 1280, 800


@pytest.fixture(scope="module")
def report(tiny_dirs, tmp_path_factory) -> tuple[Path, dict, str, str]:
    """One run with the issue's rows: the folder, the JSON, stdout and the page."""
    cwd = tmp_path_factory.mktemp("report_answer")
    model = str(tiny_dirs["bert_cls"])
    out = run_cli(["compare", str(FIXTURE), "--task", "retrieval", "--model", model,
                   "--recipes", *ROWS, "--bootstrap", "200", "--json", "r.json",
                   "--report", "r.html", "--quiet"], cwd=cwd)  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    doc = json.loads((cwd / "r.json").read_text(encoding="utf-8"))
    return cwd, doc, out.stdout.decode(), (cwd / "r.html").read_text(encoding="utf-8")


def test_the_page_opens_with_the_answer_and_folds_the_definitions(report):
    _, doc, stdout, markup = report
    page = check_page(markup, stdout, doc)  # the answer first, the table cell for cell
    assert markup.index('id="answer"') < markup.index('id="results"')
    explain = markup[markup.index('<details class="explain"') :]
    assert "bytes/doc: what an index stores" in explain[: explain.index("</details>")]
    assert 'div class="wide"' not in markup and "overflow-x" not in markup
    assert "search ms" not in page.tables["results-table"]["head"]


def test_every_export_cell_is_the_rows_own_or_says_why_not(report):
    """The multi-vector row exports (``export --from-compare`` writes that folder); BM25
    has no model; the hybrid exports its dense side; the documents' command note is only
    where a command embeds the queries alone (not for a BEIR folder, whose commands embed
    both)."""
    from poolkit.cli import build_parser

    markup = report[3]
    page = PageText(markup)
    commands = {row[1].removesuffix(" *"): row for row in page.tables["commands-table"]["rows"]}
    multi = commands["multivector:tokens/l2"][3]
    argv = shlex.split(multi)
    args = build_parser().parse_args(argv[1:])
    assert argv[:2] == ["poolkit", "export"] and args.recipe == "multivector:tokens/l2"
    assert (
        commands["bm25"][3] == "BM25 has no model to export: its index is built with the call shown"
    )
    assert commands["rrf(mean,bm25)"][3].startswith("mean: poolkit export ")
    assert "--format onnx" in commands["mean/16/int8"][3]
    assert "embed the documents with the same command" not in markup
    assert "not exported" not in [row[3] for row in commands.values()]


def _measured(browser: str, folder: Path, markup: str) -> dict:
    """The page's layout at 1,280 x 800, measured by Chromium: a copy of the page with a
    script (the page itself has none, and its policy forbids one) that writes the widths
    and the answer's bottom into the title."""
    probe = (
        "<script>addEventListener('load', () => { const t = document.getElementById("
        "'results-table').getBoundingClientRect(); const a = document.getElementById("
        "'answer').getBoundingClientRect(); document.title = 'LAYOUT' + JSON.stringify({"
        "scroll: document.documentElement.scrollWidth, client: document.documentElement."
        "clientWidth, table: t.right, answer: a.bottom}); });</script>"
    )
    copy = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", markup)
    (folder / "probe.html").write_text(copy.replace("</body>", probe + "</body>"), "utf-8")
    dom = run_chromium(browser, folder / "profile", f"--window-size={WIDTH},{FOLD}",
                       "--dump-dom", (folder / "probe.html").as_uri())  # fmt: skip
    assert dom.returncode == 0, dom.stderr.decode()[-2000:]
    title = re.search(r"<title>LAYOUT(.*?)</title>", dom.stdout.decode())
    assert title, dom.stdout.decode()[:2000]
    return json.loads(title.group(1).replace("&quot;", '"'))


@pytest.mark.slow
def test_report_fits_1280_px_with_the_answer_above_the_fold(report):
    browser = chromium()
    cwd, _, _, markup = report
    layout = _measured(browser, cwd, markup)
    assert layout["scroll"] <= layout["client"] <= WIDTH, layout  # no horizontal scrolling
    assert layout["table"] <= layout["client"], layout  # the whole table, sig included
    assert layout["answer"] <= FOLD, layout  # the answer above the fold
    shot = cwd / "fold.png"
    run = run_chromium(browser, cwd / "profile", f"--screenshot={shot}", "--hide-scrollbars",
                       f"--window-size={WIDTH},{FOLD}", (cwd / "r.html").as_uri())  # fmt: skip
    assert run.returncode == 0 and shot.is_file(), run.stderr.decode()[-2000:]
    image = pixels(shot)[..., :3]
    assert image.shape[:2] == (FOLD, WIDTH)
    # The answer's box (border #86efac, background #f0fdf4) is in the first screen.
    border = (abs(image - [0x86 / 255, 0xEF / 255, 0xAC / 255]).max(axis=2) < 0.03).sum()
    fill = (abs(image - [0xF0 / 255, 0xFD / 255, 0xF4 / 255]).max(axis=2) < 0.01).sum()
    assert border > 500 and fill > 50_000, (border, fill)
    # Nothing runs off the right edge: the last columns of the screen are blank.
    assert image[:, -12:].min() > 0.97
