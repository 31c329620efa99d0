"""``poolkit embed --part-size N`` (texts read, embedded and committed at a time) and its
old spelling ``--chunk-size``: one option, the old spelling hidden from --help, a bad value
named as --part-size, and a manifest that keeps its ``chunk_size`` key so that work
directories written before the rename still resume. In-process, on the tiny BERT."""

from __future__ import annotations

import argparse
import json

import pytest
from clitools import run_cli

from poolkit.cli import build_parser

TEXTS = ["John works at Google", "A cat sat on the mat.", "hello world"]


def _embed_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices["embed"]


def test_chunk_size_is_the_old_spelling_of_part_size(tiny_dirs, tmp_path):
    parser = build_parser()
    base = ["embed", "in.txt", "-o", "o.npy"]
    assert parser.parse_args(base).part_size == 4096
    for flag in ("--part-size", "--chunk-size"):
        args = parser.parse_args([*base, flag, "7"])
        assert args.part_size == 7 and "chunk_size" not in vars(args), flag
    assert parser.parse_args([*base, "--chunk-size", "7", "--part-size", "5"]).part_size == 5
    shown = _embed_parser().format_help()
    assert "--part-size N" in shown and "--chunk-size" not in shown

    # A real run: the same bytes with either spelling (3 texts: parts of 2, then 1).
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    model = ["--model", str(tiny_dirs["bert_plain"]), "-s", "mean", "--quiet"]
    for flag, out in (("--part-size", "part.npy"), ("--chunk-size", "chunk.npy")):
        assert run_cli(["embed", str(src), "-o", str(tmp_path / out), flag, "2", *model],
                       cwd=tmp_path).returncode == 0  # fmt: skip
    assert (tmp_path / "part.npy").read_bytes() == (tmp_path / "chunk.npy").read_bytes()


@pytest.mark.parametrize("engine", ["local", "ray"])  # ray: checked before Ray is needed
@pytest.mark.parametrize("flag", ["--part-size", "--chunk-size"])
def test_a_part_size_of_zero_is_one_line_naming_part_size(tmp_path, flag, engine):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    argv = ["embed", str(src), "-o", str(tmp_path / "o.npy"), flag, "0", "--engine", engine]
    result = run_cli(argv, cwd=tmp_path)
    assert result.returncode == 2
    assert (
        result.stderr.decode()
        == "poolkit: error: Expected --part-size to be a positive integer, but got 0.\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_the_manifest_keeps_the_chunk_size_key(tiny_dirs, tmp_path):
    """Work directories written before the rename store --part-size as ``chunk_size``: the
    key stays, so they resume; a resume with another size names it as part_size."""
    src, out = tmp_path / "in.txt", str(tmp_path / "o.npy")
    src.write_bytes(b"one\ntwo\n\xff\n")
    model = ["--model", str(tiny_dirs["bert_plain"]), "-s", "mean", "--quiet"]
    first = run_cli(["embed", str(src), "-o", out, "--part-size", "2", *model], cwd=tmp_path)
    err = first.stderr.decode()
    assert first.returncode == 2, err
    assert err.count("\n") == 1 and "(1 finished part is kept in " in err, err
    manifest = json.loads((tmp_path / "o.npy.poolkit-work" / "manifest.json").read_text())
    assert manifest["settings"]["chunk_size"] == 2 and "part_size" not in manifest["settings"]
    src.write_bytes(b"one\ntwo\nthree\n")  # the bad line fixed
    other = run_cli(["embed", str(src), "-o", out, "--part-size", "3", "--resume", *model],
                    cwd=tmp_path)  # fmt: skip
    assert other.returncode == 2 and "(part_size: 2 then, 3 now)" in other.stderr.decode()
    same = run_cli(["embed", str(src), "-o", out, "--chunk-size", "2", "--resume", *model],
                   cwd=tmp_path)  # fmt: skip
    assert same.returncode == 0, same.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "o.npy", "o.npy.poolkit.json"]
