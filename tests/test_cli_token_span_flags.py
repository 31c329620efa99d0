"""Every flag of ``poolkit tokens`` and ``poolkit spans`` is honoured or refused in one line.

As ``test_ray.py`` walks ``embed``'s flags: the treatment tables list each flag with the
run that shows it changes the output or the behaviour; the first assertion keeps the
tables in step with the parsers, so a new flag cannot go unchecked. The CLI runs in this
process on a tiny model. ``--batch-tokens`` does not change vectors (that is its contract),
so the honour runs put a spy on the batch planner that logs the token budget it
receives (``poolkit tokens`` used to drop the flag and plan with the default 2048).
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from clitools import one_error_line
from clitools import poolkit as cli

pytestmark = pytest.mark.slow

TOKENS_TREATMENT = {
    "input": "run_a", "--text": "run_b", "--text-column": "run_a", "--input-format": "run_a",
    "--output": "run_a", "--overwrite": "run_a + refused", "--no-vectors": "run_b",
    "--decimals": "run_a", "--model": "run_a", "--max-length": "run_a + run_b",
    "--device": "run_a + refused", "--dtype": "run_a", "--batch-tokens": "run_a + refused",
    "--long-text": "run_a + run_b", "--quiet": "run_b against run_c", "--debug": "traceback",
}  # fmt: skip

SPANS_TREATMENT = {
    "input": "run_a", "--text": "run_b", "--span": "run_b + refused", "--strategy": "run_a",
    "--recipe": "run_d + refused",
    "--output": "run_a", "--overwrite": "run_a + refused", "--no-vectors": "run_b",
    "--decimals": "run_a", "--model": "run_a", "--max-length": "run_a + run_b",
    "--device": "run_a + refused", "--dtype": "run_a", "--batch-tokens": "run_a + refused",
    "--long-text": "run_a", "--quiet": "run_b against run_c", "--debug": "traceback",
}  # fmt: skip


LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 4)  # 36 tokens
TEXTS = [LONG, "John works at Google in London.", "A cat sat on the mat."]


def _options(command: str) -> set[str]:
    from poolkit.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {
        (next(o for o in a.option_strings if o.startswith("--")) if a.option_strings else a.dest)
        for a in sub.choices[command]._actions
        if not isinstance(a, argparse._HelpAction)
    }


def _spied(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[int]]:
    """``poolkit ARGS`` (its output as text) with a spy on ``Encoder._plan``: the token
    budget of each planned call."""
    from poolkit.encoder import Encoder

    budgets: list[int] = []
    plan = Encoder._plan

    def spy(self, order, lengths, budget):
        budgets.append(budget)
        return plan(self, order, lengths, budget)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Encoder, "_plan", spy)
        result = cli(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr.decode()
    text = subprocess.CompletedProcess(result.args, 0, result.stdout.decode(),
                                       result.stderr.decode())  # fmt: skip
    return text, budgets


def _lines(text: str) -> list[dict]:
    return [json.loads(x) for x in text.splitlines()]


def _is_rounded(values: np.ndarray, decimals: int) -> bool:
    return bool(np.all(np.abs(values * 10**decimals - np.round(values * 10**decimals)) < 1e-6))


def test_tokens_flags_are_honoured_or_refused(tmp_path, tiny_dirs):
    import poolkit

    assert _options("tokens") == set(TOKENS_TREATMENT)
    model = str(tiny_dirs["bert_plain"])
    # run_a: the texts in field "b" of JSON lines under a .txt name: only an honoured
    # --input-format and --text-column read them; OUTPUT exists and is replaced.
    rows = [{"a": f"decoy {i}", "b": t} for i, t in enumerate(TEXTS)]
    (tmp_path / "in.txt").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    (tmp_path / "out.jsonl").write_text("old\n", encoding="utf-8")
    run_a = ["tokens", "in.txt", "--input-format", "jsonl", "--text-column", "b", "-o",
             "out.jsonl", "--overwrite", "--decimals", "3", "--model", model, "--max-length",
             "8", "--device", "cpu", "--dtype", "bfloat16", "--batch-tokens", "16",
             "--long-text", "window"]  # fmt: skip
    _, budgets = _spied(tmp_path, *run_a)
    assert budgets == [16], budgets  # --batch-tokens reached the planner (default 2048)
    got = _lines((tmp_path / "out.jsonl").read_text(encoding="utf-8"))
    assert [o["text"] for o in got] == TEXTS
    want = poolkit.embed_tokens(TEXTS, model, max_length=8, dtype="bfloat16",
                                long_text="window", device="cpu")  # fmt: skip
    fp32 = poolkit.embed_tokens(TEXTS, model, max_length=8, long_text="window", device="cpu")
    gap = 0.0  # bfloat16 against float32: an ignored --dtype leaves it near 0
    for o, w, f in zip(got, want, fp32, strict=True):
        assert o["tokens"] == w.tokens and o["offsets"] == w.offsets.tolist()
        vectors = np.asarray(o["vectors"])
        assert vectors.shape == (len(w.tokens), 32)  # the tiny model's width, not MiniLM's 384
        assert _is_rounded(vectors, 3)
        assert np.abs(vectors - w.vectors).max() <= 5e-4 + 1e-6
        gap = max(gap, float(np.abs(vectors - f.vectors).max()))
    assert len(got[0]["tokens"]) == 36  # window: all of the long text, though max length 8
    assert gap > 0.01

    # run_b: --text, --no-vectors, truncation at --max-length; --quiet keeps stderr empty.
    b, _ = _spied(tmp_path, "tokens", "--text", LONG, "--text", "John works", "--model", model,
                  "--max-length", "8", "--no-vectors", "--quiet")  # fmt: skip
    out_b = _lines(b.stdout)
    assert [o["text"] for o in out_b] == [LONG, "John works"] and b.stderr == ""
    assert [len(o["tokens"]) for o in out_b] == [6, 2] and all("vectors" not in o for o in out_b)
    # run_c: run_b without --quiet and --no-vectors: the truncation notice, and vectors.
    c, _ = _spied(tmp_path, "tokens", "--text", LONG, "--text", "John works", "--model", model,
                  "--max-length", "8")  # fmt: skip
    assert "TruncationWarning" in c.stderr and all("vectors" in o for o in _lines(c.stdout))

    # Refused in one line: a bad budget (as embed refuses it), a device that does not exist,
    # an existing OUTPUT without --overwrite; --debug shows the traceback instead.
    one_error_line(cli("tokens", "--text", "a", "--batch-tokens", "0", cwd=tmp_path), 2,
                   "Expected --batch-tokens to be a positive integer, but got 0.")  # fmt: skip
    one_error_line(cli("tokens", "--text", "a", "--model", model, "--device", "bogus",
                           cwd=tmp_path), 1, "bogus")  # fmt: skip
    one_error_line(cli("tokens", "--text", "a", "--model", model, "-o", "out.jsonl",
                           cwd=tmp_path), 2, "out.jsonl: already exists; pass --overwrite")  # fmt: skip
    debug = cli("tokens", "--text", "a", "--batch-tokens", "0", "--debug", cwd=tmp_path)
    assert debug.returncode != 0 and "Traceback" in debug.stderr.decode()


def test_spans_flags_are_honoured_or_refused(tmp_path, tiny_dirs):
    import poolkit

    assert _options("spans") == set(SPANS_TREATMENT)
    model = str(tiny_dirs["bert_plain"])
    # The long text's second span lies past token 8: only an honoured --long-text window
    # embeds it (truncation leaves it no token, which is refused).
    spans = [[(4, 9), (len(LONG) - 8, len(LONG))], [(11, 17)], [(2, 5), (6, 9)]]
    rows = [{"text": t, "spans": [list(s) for s in ss]} for t, ss in zip(TEXTS, spans, strict=True)]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), "utf-8")
    (tmp_path / "out.jsonl").write_text("old\n", encoding="utf-8")
    run_a = ["spans", "in.jsonl", "--strategy", "mean", "-o", "out.jsonl", "--overwrite",
             "--decimals", "3", "--model", model, "--max-length", "8", "--device", "cpu",
             "--dtype", "bfloat16", "--batch-tokens", "16", "--long-text", "window"]  # fmt: skip
    _, budgets = _spied(tmp_path, *run_a)
    assert budgets == [16], budgets
    got = _lines((tmp_path / "out.jsonl").read_text(encoding="utf-8"))
    want, token_spans = poolkit.embed_spans(TEXTS, spans, model, "mean", max_length=8,
                                            dtype="bfloat16", long_text="window",
                                            device="cpu", return_token_spans=True)  # fmt: skip
    fp32 = poolkit.embed_spans(TEXTS, spans, model, "mean", max_length=8, long_text="window",
                               device="cpu")  # fmt: skip
    gap = 0.0
    for o, w, ts, f in zip(got, want, token_spans, fp32, strict=True):
        assert [[s["token_start"], s["token_end"]] for s in o["spans"]] == ts.tolist()
        vectors = np.asarray([s["vector"] for s in o["spans"]])
        assert vectors.shape == (len(ts), 32)  # mean over the tiny model (endpoints: 64)
        assert _is_rounded(vectors, 3)
        assert np.abs(vectors - w).max() <= 5e-4 + 1e-6
        gap = max(gap, float(np.abs(vectors - f).max()))
    assert got[0]["spans"][1]["token_start"] > 8  # past the max length: windows ran
    assert gap > 0.01  # --dtype bfloat16 honoured

    # run_b: --text with --span, --no-vectors; --quiet silences the truncation notice.
    flags = ["spans", "--text", LONG, "--span", "0:3", "--span", "4:9", "--model", model,
             "--max-length", "8"]  # fmt: skip
    b, _ = _spied(tmp_path, *flags, "--no-vectors", "--quiet")
    (obj,) = _lines(b.stdout)
    assert b.stderr == "" and [(s["start"], s["end"]) for s in obj["spans"]] == [(0, 3), (4, 9)]
    assert all("vector" not in s for s in obj["spans"])
    c, _ = _spied(tmp_path, *flags)  # run_c: endpoints (the default), 2 x 32 wide
    (obj,) = _lines(c.stdout)
    assert "TruncationWarning" in c.stderr and [len(s["vector"]) for s in obj["spans"]] == [64, 64]

    base = ["spans", "--text", "John works", "--span", "0:4", "--model", model]
    one_error_line(cli(*base, "--batch-tokens", "0", cwd=tmp_path), 2,
                   "Expected --batch-tokens to be a positive integer, but got 0.")  # fmt: skip
    one_error_line(cli(*base, "--device", "bogus", cwd=tmp_path), 1, "bogus")
    one_error_line(cli(*base, "-o", "out.jsonl", cwd=tmp_path), 2,
                   "out.jsonl: already exists; pass --overwrite")  # fmt: skip
    one_error_line(cli("spans", "--text", "John works", "--span", "0-4", cwd=tmp_path), 2,
                   "Expected --span to be START:END")  # fmt: skip
    debug = cli(*base, "--batch-tokens", "0", "--debug", cwd=tmp_path)
    assert debug.returncode != 0 and "Traceback" in debug.stderr.decode()

    # run_d: --recipe takes a span-level recipe (layers included), or a bare strategy as
    # span-level; -s is its shorthand; other levels and both together are refused.
    text, pairs = "John works at Google in Paris.", [(0, 4), (14, 20)]
    flags = ["spans", "--text", text, "--model", model, "--span", "0:4", "--span", "14:20"]
    for recipe in ("span:x,y,x*y@first_last", "mean@-1,-2:concat"):
        (obj,) = _lines(_spied(tmp_path, *flags, "--recipe", recipe)[0].stdout)
        (want,) = poolkit.embed_spans([text], [pairs], model, recipe=recipe)
        if ":" not in recipe.split("@")[0]:
            (same,) = poolkit.embed_spans([text], [pairs], model, recipe=f"span:{recipe}")
            assert np.array_equal(want, same)
        assert np.abs(np.asarray([s["vector"] for s in obj["spans"]]) - want).max() < 5e-4
    short = _lines(_spied(tmp_path, *flags, "-s", "max")[0].stdout)
    assert short == _lines(_spied(tmp_path, *flags, "--recipe", "span:max")[0].stdout)
    one_error_line(cli(*flags, "--recipe", "word:first", cwd=tmp_path), 2,
                   "Expected --recipe to be a span-level recipe, e.g. span:endpoints or "
                   "span:mean@last4, but got 'word:first', a word-level one")  # fmt: skip
    one_error_line(cli(*flags, "--recipe", "mean", "-s", "max", cwd=tmp_path), 2,
                   "Expected -s/--strategy to be unset with --recipe (it names the strategy "
                   "itself), but got 'max'. Drop it")  # fmt: skip
    one_error_line(cli(*flags, "--recipe", "span:meen", cwd=tmp_path), 2,
                   "Closest valid name: span:mean")  # fmt: skip
