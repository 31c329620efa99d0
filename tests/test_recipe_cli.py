"""Every row `poolkit compare` scores can be embedded: `poolkit embed --recipe NAME` writes
the vectors compare scored, so the row's figure is recomputed from the embedded files.

The real CLI (subprocesses), the real model, and the 167 STS-B pairs committed under
tests/data, written here as a `sentence1, sentence2, score` table that both commands read.
The metric is recomputed independently (cosine per pair, then SciPy's Spearman/Pearson).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from clitools import one_error_line, poolkit
from scipy.stats import pearsonr, spearmanr
from testdata import fixture, read_sts_pairs, sts_pairs_table

from poolkit.recipe import Recipe

pytestmark = pytest.mark.slow
DATA = "pairs.tsv"  # written into each test's folder by write_pairs_table


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def gold_scores() -> np.ndarray:
    return np.array([score for score, _, _ in read_sts_pairs(fixture("stsb-dev-sample.csv"))])


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """compare on the fixture with every default strategy at every layer variant."""
    return _sts_compare(tmp_path_factory.mktemp("recipe_cli"), "--layers")


def test_every_compare_row_embeds_to_the_vectors_compare_scored(compared) -> None:
    cwd, doc, table = compared
    names = [row["recipe"] for row in doc["results"]]
    # A merged row stands for its members: the row's recipe with each member's strategy.
    members = {
        row["recipe"]: [
            str(Recipe.parse(row["recipe"]).replace(strategy=m)) for m in row["members"]
        ]
        for row in doc["results"]
    }
    every = [name for row in names for name in members[row]]
    # 11 sequence strategies x 3 layer selections, mean_no_special and layer variants included;
    # under cosine, sum and mean_sqrt_len merge into mean's row at each layer selection.
    assert len(every) == len(set(every)) == 33
    assert len(names) == 33 - 2 * 3
    assert "mean_no_special" in names and "mean_no_special@last4" in names
    assert members["mean@last4"] == ["mean@last4", "sum@last4", "mean_sqrt_len@last4"]
    # Every name in the table is a row of the JSON, and the other way round.
    body = table.split("\n\n", 1)[1].splitlines()  # the table, after the answer
    table_names = [line.split()[1] for line in body[2 : 2 + len(names)]]
    assert table_names == names
    for column in ("sentence1", "sentence2"):
        r = poolkit(
            "embed", DATA, "--text-column", column, "-o", f"{column}.parquet",
            "--recipe", *every, "--quiet", cwd=cwd,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr.decode()
    s1 = pq.read_table(cwd / "sentence1.parquet")
    s2 = pq.read_table(cwd / "sentence2.parquet")
    gold = gold_scores()
    for row in doc["results"]:
        for name in members[row["recipe"]]:
            a = np.stack(s1.column(name).to_numpy(zero_copy_only=False))
            b = np.stack(s2.column(name).to_numpy(zero_copy_only=False))
            cos = cosine_rows(a, b)
            assert abs(spearmanr(cos, gold).statistic - row["spearman"]) <= 1e-6, (name, row)
            assert abs(pearsonr(cos, gold).statistic - row["pearson"]) <= 1e-6, (name, row)


@pytest.mark.parametrize("name", ["mean_no_special", "cls+mean@last4", "max@first_last"])
def test_one_recipe_to_npy_reproduces_its_row(compared, name: str) -> None:
    cwd, doc, _ = compared
    row = next(r for r in doc["results"] if r["recipe"] == name)
    vectors = []
    for column in ("sentence1", "sentence2"):
        out = f"{name.replace('@', '_').replace('+', '_')}_{column}.npy"
        r = poolkit("embed", DATA, "--text-column", column, "-o", out, "--recipe", name,
                    "--quiet", cwd=cwd)  # fmt: skip
        assert r.returncode == 0, r.stderr.decode()
        vectors.append(np.load(cwd / out))
    cos = cosine_rows(*vectors)
    assert abs(spearmanr(cos, gold_scores()).statistic - row["spearman"]) <= 1e-6


def _sts_compare(cwd: Path, *flags: str) -> tuple[Path, dict, str]:
    sts_pairs_table(cwd / DATA)
    r = poolkit("compare", DATA, "--task", "sts", *flags, "--json", "sts.json", "--quiet", cwd=cwd)
    assert r.returncode == 0, r.stderr.decode()
    return cwd, json.loads((cwd / "sts.json").read_text()), r.stdout.decode()


@pytest.fixture(scope="module")
def compared_onnx(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, str]:
    """compare through the ONNX backend with int8 rows: its winner command must keep the
    backend, and the int8 rows reproduce too (int8 vectors do not depend on batches)."""
    return _sts_compare(tmp_path_factory.mktemp("recipe_onnx"), "--recipes", "mean", "cls",
                        "--backend", "onnx", "--quantize", "int8", "--int8-rows", "all")  # fmt: skip


@pytest.mark.parametrize("quantize", [None, "int8"])
def test_onnx_rows_reproduce_from_embed(compared_onnx, quantize) -> None:
    cwd, doc, _ = compared_onnx
    rows = [r for r in doc["results"] if r["quantize"] == quantize]
    assert {r["recipe"] for r in rows} == {"mean", "cls"}
    flags = ["--backend", "onnx"] + (["--quantize", quantize] if quantize else [])
    for row in rows:
        vectors = []
        for column in ("sentence1", "sentence2"):
            out = f"{row['recipe']}_{quantize}_{column}.npy"
            r = poolkit("embed", DATA, "--text-column", column, "-o", out, "--recipe",
                        row["recipe"], *flags, "--quiet", cwd=cwd)  # fmt: skip
            assert r.returncode == 0, r.stderr.decode()
            vectors.append(np.load(cwd / out))
        cos = cosine_rows(*vectors)
        assert abs(spearmanr(cos, gold_scores()).statistic - row["spearman"]) <= 1e-6, row


@pytest.mark.parametrize("which", ["compared", "compared_onnx"])
def test_the_answer_names_the_command_that_embeds_the_best_row(which, request) -> None:
    cwd, doc, table = request.getfixturevalue(which)
    winner = doc["results"][0]
    assert doc["recommended"]["best"]["recipe"] == winner["recipe"]
    prefix = f"embed #1 {doc['recommended']['best']['name']}: "
    line = next(x for x in table.split("\n\n", 1)[0].splitlines() if x.startswith(prefix))
    argv = shlex.split(line[len(prefix) :])
    assert argv[:2] == ["poolkit", "embed"] and argv[argv.index("--recipe") + 1] == winner["recipe"]
    assert ("--backend" in argv) == (which == "compared_onnx"), argv
    # Run it as printed, on each column of the data: the winner's figure comes back.
    argv[argv.index("INPUT")] = DATA
    vectors = []
    for column in ("sentence1", "sentence2"):
        argv[argv.index("-o") + 1] = f"winner_{column}.npy"
        r = poolkit(*argv[1:], "--text-column", column, "--quiet", cwd=cwd)
        assert r.returncode == 0, r.stderr.decode()
        vectors.append(np.load(cwd / f"winner_{column}.npy"))
    cos = cosine_rows(*vectors)
    assert abs(spearmanr(cos, gold_scores()).statistic - winner["spearman"]) <= 1e-6


@pytest.mark.parametrize(
    ("args", "fragments"),
    [(["--recipe", "meen"], ["--recipe to be", "Closest valid name: mean."]),
     (["--recipe", "mean@last5"], ["--recipe to be", "Closest valid name: mean@last4."]),
     (["--recipe", "mean", "-s", "cls"], ["Expected --recipe alone (it names the strategy"]),
     (["--recipe", "mean", "--layers", "last4"], ["Expected --recipe alone (it names the strategy"]),
     (["-s", "avg"], ["--strategy to be one of cls, mean"])],
)  # fmt: skip
def test_bad_recipes_are_one_line_with_status_2(tmp_path: Path, args, fragments) -> None:
    (tmp_path / "in.txt").write_text("a\nb\n", encoding="utf-8")
    r = poolkit("embed", "in.txt", "-o", "out.npy", *args, cwd=tmp_path)
    one_error_line(r, 2, *fragments)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


@pytest.mark.parametrize("flag", ["--recipes", "--strategies"])  # and its old spelling
def test_compare_names_the_recipes_flag(tmp_path: Path, flag: str) -> None:
    sts_pairs_table(tmp_path / DATA)
    r = poolkit("compare", DATA, "--task", "sts", flag, "meen", cwd=tmp_path)
    one_error_line(r, 2, "--recipes to be", "Closest valid name: mean.")


# ---------------------------------------------------------------- budget rows (--dims/--precision)


def _page_commands(page: str) -> dict[str, str]:
    """recipe -> embed command of the report's commands table (as the browser shows them)."""
    import html
    import re

    found = re.findall(r'<tr[^>]*><td>[^<]*</td><td><code>(.*?)</code></td><td class="cmd">(.*?)</td>',
                       page)  # fmt: skip
    return {html.unescape(name): html.unescape(cmd) for name, cmd in found}


def _stored_similarity(a: np.ndarray, b: np.ndarray, precision: str, dims: int) -> np.ndarray:
    """The documented score of stored vectors: 1 - hamming/dims on the bits (int8 bytes
    offset by -128, as sentence-transformers packs them), else the cosine of the values."""
    if precision == "binary":
        assert a.dtype == b.dtype == np.int8
        bits_a = np.unpackbits((a.astype(np.int16) + 128).astype(np.uint8), axis=1, count=dims)
        bits_b = np.unpackbits((b.astype(np.int16) + 128).astype(np.uint8), axis=1, count=dims)
        return 1.0 - (bits_a != bits_b).sum(1) / dims
    return cosine_rows(a, b)


def test_every_budget_row_embeds_to_the_stored_vectors_compare_scored(tmp_path: Path) -> None:
    """Each budget row's printed command, run on the texts compare embedded (each distinct
    sentence of the pairs once, in compare's order; int8: --calibrate on the same texts,
    the ranges compare took), gives back the row's figures from the stored vectors alone.
    (Embedding each column on its own batches the texts differently; float noise of ~1e-7
    then flips a few int8 roundings and moves the int8 row's Pearson by ~5e-6.)"""
    cwd, doc, _ = _sts_compare(tmp_path, "--recipes", "mean", "cls", "--dims", "128",
                               "--precision", "float32", "int8", "binary",
                               "--report", "page.html")  # fmt: skip
    budget = [row for row in doc["results"] if row["recipe"].count("/")]
    assert sorted(r["recipe"] for r in budget) == ["mean/128", "mean/128/binary", "mean/128/int8"]
    commands = _page_commands((cwd / "page.html").read_text(encoding="utf-8"))
    pairs = read_sts_pairs(fixture("stsb-dev-sample.csv"))
    distinct = list(dict.fromkeys([p[1] for p in pairs] + [p[2] for p in pairs]))
    assert not any("\n" in t for t in distinct) and len(distinct) == 330
    (cwd / "compared.txt").write_text("\n".join(distinct) + "\n", encoding="utf-8")
    where = {t: i for i, t in enumerate(distinct)}
    a = np.array([where[p[1]] for p in pairs])
    b = np.array([where[p[2]] for p in pairs])
    gold = gold_scores()
    for row in budget:
        name, dims, precision = row["recipe"], row["dims"], row["precision"]
        argv = shlex.split(commands[name])
        assert argv[:2] == ["poolkit", "embed"] and argv[argv.index("--recipe") + 1] == name
        # an int8 row's command reuses the ranges it was scored with (the --json file, #38)
        assert ("--ranges" in argv or "--calibrate" in argv) == (precision == "int8"), argv
        argv[argv.index("INPUT")] = "compared.txt"
        if "--calibrate" in argv:
            argv[argv.index("--calibrate") + 1] = "compared.txt"
        out = f"{name.replace('/', '_')}.npy"
        argv[argv.index("-o") + 1] = out
        r = poolkit(*argv[1:], "--quiet", cwd=cwd)
        assert r.returncode == 0, r.stderr.decode()
        stored = np.load(cwd / out)
        width = {"float32": (np.float32, dims), "int8": (np.int8, dims),
                 "binary": (np.int8, dims // 8)}[precision]  # fmt: skip
        assert (stored.dtype, stored.shape) == (width[0], (330, width[1])), (name, stored.shape)
        assert stored.nbytes // 330 == row["bytes_per_vector"]
        sim = _stored_similarity(stored[a], stored[b], precision, dims)
        assert abs(spearmanr(sim, gold).statistic - row["spearman"]) <= 1e-6, row
        assert abs(pearsonr(sim, gold).statistic - row["pearson"]) <= 1e-6, row
