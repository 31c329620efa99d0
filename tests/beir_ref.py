"""What retrieval tests read back: a BEIR folder's qrels, and the ``poolkit embed`` commands
``compare`` printed, run as printed (the independent side of the round-trip tests)."""

from __future__ import annotations

import shlex
from pathlib import Path

from clitools import run_cli


def read_qrels(folder: Path) -> dict[str, dict[str, int]]:
    """``qrels/test.tsv`` of a BEIR folder: query id -> {document id: relevance}."""
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, did, rel = line.split("\t")
        qrels.setdefault(qid, {})[did] = int(rel)
    return qrels


def run_printed_embeds(command: str, cwd: Path) -> list[tuple[str, Path]]:
    """Each ``poolkit embed`` of a printed ``command`` (joined by ``&&``) run as printed:
    ``(recipe, output file)`` each, in order."""
    written = []
    for one in command.split(" && "):
        argv = shlex.split(one)
        assert argv[:2] == ["poolkit", "embed"], one
        ran = run_cli([*argv[1:], "--quiet"], cwd=cwd)
        assert ran.returncode == 0, (one, ran.stderr.decode())
        written.append((argv[argv.index("--recipe") + 1], cwd / argv[argv.index("-o") + 1]))
    return written
