"""The token-state cache from the command line (docs/cache.md): `compare` keeps it by
default and a second run encodes nothing and gives the same rows; `embed --cache`;
`poolkit cache info|prune|clear`; its flags refused in one line where they cannot apply;
a killed run and two runs sharing the cache (slow: real processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from clitools import command, one_error_line, poolkit

DATA = Path(__file__).parent / "data"
STS = DATA / "stsb-dev-sample.csv"
RETRIEVAL = DATA / "stsb-images-retrieval"


def _rows(doc: dict) -> list[dict]:
    """The rows without what differs between any two runs: times measured in the run (and
    the frontier over them), and the command's path to the run's own ranges file."""

    def timed(key: str) -> bool:
        return key.endswith(("_ms", "_ms_per_query", "seconds")) or key in (
            "speedup", "frontier_query", "embed_command")  # fmt: skip

    return [{k: v for k, v in r.items() if not timed(k)} for r in doc["results"]]


def _compare(tmp_path: Path, name: str, *flags: str, data: Path = STS) -> dict:
    out = tmp_path / f"{name}.json"
    task = "retrieval" if data == RETRIEVAL else "sts"
    done = poolkit("compare", str(data), "--task", task, "--bootstrap", "0", "--quiet",
                   "--json", str(out), *flags, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(out.read_text())


@pytest.mark.slow  # whole commands, twice
def test_a_second_compare_reads_every_text_and_gives_the_same_rows(tmp_path, monkeypatch):
    from poolkit.backends.pytorch import TorchBackend

    loads: list[int] = []
    real = TorchBackend._load

    def counted(self):
        loads.append(self._model is None)
        return real(self)

    monkeypatch.setattr(TorchBackend, "_load", counted)
    flags = ["--recipes", "mean", "cls", "max@last4", "mean/128/int8"]
    first = _compare(tmp_path, "first", *flags, "--cache-dir", str(tmp_path / "c"))
    assert sum(loads) == 1  # the weights, once
    loads.clear()
    second = _compare(tmp_path, "second", *flags, "--cache-dir", str(tmp_path / "c"))
    assert sum(loads) == 0  # every state read: the weights are never loaded
    plain = _compare(tmp_path, "plain", *flags, "--no-cache")
    assert first["cache"]["texts_read"] == 0 and first["cache"]["texts_encoded"] > 0
    assert second["cache"]["texts_encoded"] == 0
    assert second["cache"]["texts_read"] == first["cache"]["texts_encoded"]
    assert plain["cache"] == {"enabled": False}
    assert _rows(second) == _rows(first) == _rows(plain)  # bit for bit: JSON floats


@pytest.mark.slow  # whole commands, twice
def test_retrieval_rows_and_their_query_cost_come_back_from_the_cache(tmp_path):
    flags = ["--recipes", "mean", "multivector:tokens/l2", "--cache-dir", str(tmp_path / "c")]
    first = _compare(tmp_path, "first", *flags, data=RETRIEVAL)
    second = _compare(tmp_path, "second", *flags, data=RETRIEVAL)
    assert second["cache"]["texts_encoded"] == 0 and second["cache"]["texts_read"] > 0
    assert _rows(second) == _rows(first)
    # The query cost is the model's, as recorded when the states were encoded, not the
    # time it took to read them back (within rounding of the per-row shares).
    for a, b in zip(first["results"], second["results"], strict=True):
        if a.get("encode_ms") is not None:  # reading takes a small fraction of encoding
            assert b["encode_ms"] > 0.5 * a["encode_ms"], (a["recipe"], a["encode_ms"])


@pytest.mark.slow  # whole commands, twice
def test_embed_cache_is_off_by_default_and_exact_when_on(tmp_path):
    texts = tmp_path / "t.txt"
    texts.write_text("John works at Google.\nA man is playing a guitar.\nA third one.\n")
    runs = {}
    for name, flags in (("plain", []), ("cold", ["--cache"]), ("warm", ["--cache"])):
        done = poolkit("embed", str(texts), "-o", f"{name}.npy", *flags, "--cache-dir", "c",
                       cwd=tmp_path) if flags else poolkit("embed", str(texts), "-o",
                                                           f"{name}.npy", cwd=tmp_path)  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()
        runs[name] = (np.load(tmp_path / f"{name}.npy"), done.stderr.decode())
    np.testing.assert_array_equal(runs["cold"][0], runs["plain"][0])
    np.testing.assert_array_equal(runs["warm"][0], runs["plain"][0])
    assert "token states" not in runs["plain"][1]
    assert "0 texts read from the cache" in runs["cold"][1] and "3 encoded" in runs["cold"][1]
    assert "3 texts read from the cache" in runs["warm"][1] and "0 encoded" in runs["warm"][1]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["compare", str(STS), "--task", "sts", "--no-cache", "--cache-dir", "x"],
         ["--cache-dir", "given only with the cache on"]),
        (["embed", str(STS), "-o", "o.npy", "--cache-size", "1G"],
         ["--cache-size", "given only with the cache on", "--cache"]),
        (["compare", str(STS), "--task", "sts", "--cache-size", "lots"],
         ["--cache-size", "a size such as 500M"]),
        (["compare", str(STS), "--task", "sts", "--backend", "onnx", "--cache-layers", "all"],
         ["--cache-layers", "used with --backend onnx", "--backend torch"]),
        (["cache", "info", "--max-size", "1G"], ["--max-size", "given with prune"]),
        (["cache", "prune"], ["--max-size", "given with prune"]),
        (["cache", "clear", "--json"], ["--json", "given with info"]),
    ],
)  # fmt: skip
def test_cache_flags_that_cannot_apply_are_refused_in_one_line(tmp_path, args, fragments):
    one_error_line(poolkit(*args, cwd=tmp_path), 2, *fragments)
    assert not (tmp_path / "o.npy").exists() and not (tmp_path / "o").exists()


@pytest.mark.slow  # whole commands, twice
def test_cache_info_prune_and_clear(tmp_path):
    root = tmp_path / "c"
    _compare(tmp_path, "a", "--recipes", "mean", "--cache-dir", str(root))
    done = poolkit("cache", "info", "--json", "--cache-dir", str(root), cwd=tmp_path)
    info = json.loads(done.stdout)
    on_disk = sum(p.stat().st_size for p in root.glob("states/v1/*/*.pks"))
    assert info["bytes"] == on_disk > 0 and info["shards"] >= 1
    (space,) = info["namespaces"]
    assert space["backend"] == "torch" and space["layers"] == "last" and space["max_length"] == 256
    text = poolkit("cache", "info", "--cache-dir", str(root), cwd=tmp_path).stdout.decode()
    assert "all-MiniLM-L6-v2" in text and f"{info['shards']} shard" in text
    pruned = poolkit("cache", "prune", "--max-size", "0", "--cache-dir", str(root), cwd=tmp_path)
    assert pruned.returncode == 0 and "0 B in 0 shards left" in pruned.stdout.decode()
    _compare(tmp_path, "b", "--recipes", "mean", "--cache-dir", str(root))
    cleared = poolkit("cache", "clear", "--cache-dir", str(root), cwd=tmp_path)
    assert cleared.returncode == 0 and not list(root.glob("states/v1/*/*.pks"))
    assert not (root / "states" / "v1").exists()


def _process(tmp_path: Path, name: str, root: Path) -> subprocess.Popen:
    args = command("compare", str(RETRIEVAL), "--task", "retrieval", "--recipes", "mean", "cls",
                   "--bootstrap", "0", "--quiet", "--batch-tokens", "256", "--json",
                   str(tmp_path / f"{name}.json"), "--cache-dir", str(root))  # fmt: skip
    return subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_a_compare_killed_while_writing_the_cache_then_rerun_gives_the_uncached_rows(tmp_path):
    root = tmp_path / "c"
    job = _process(tmp_path, "killed", root)
    deadline = time.monotonic() + 120
    while len(list(root.glob("states/v1/*/*.pks"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(job.pid, signal.SIGKILL)
    job.wait()
    assert job.returncode == -signal.SIGKILL and not (tmp_path / "killed.json").exists()
    written = len(list(root.glob("states/v1/*/*.pks")))
    assert written >= 3
    again = _process(tmp_path, "again", root)
    assert again.wait() == 0, again.stderr.read().decode()
    plain = _compare(tmp_path, "plain", "--recipes", "mean", "cls", "--batch-tokens", "256",
                     "--no-cache", data=RETRIEVAL)  # fmt: skip
    rerun = json.loads((tmp_path / "again.json").read_text())
    assert 0 < rerun["cache"]["texts_read"] and rerun["cache"]["texts_encoded"] > 0
    assert _rows(rerun) == _rows(plain)


@pytest.mark.slow
def test_two_compares_sharing_a_cache_both_finish_correct(tmp_path):
    root = tmp_path / "c"
    jobs = [_process(tmp_path, name, root) for name in ("one", "two")]
    for job in jobs:
        assert job.wait() == 0, job.stderr.read().decode()
    plain = _compare(tmp_path, "plain", "--recipes", "mean", "cls", "--batch-tokens", "256",
                     "--no-cache", data=RETRIEVAL)  # fmt: skip
    for name in ("one", "two"):
        assert _rows(json.loads((tmp_path / f"{name}.json").read_text())) == _rows(plain), name
    third = _process(tmp_path, "three", root)
    assert third.wait() == 0
    assert json.loads((tmp_path / "three.json").read_text())["cache"]["texts_encoded"] == 0


@pytest.mark.slow  # whole commands, twice
def test_a_second_diagnose_encodes_nothing_and_says_the_same(tmp_path):
    texts = tmp_path / "t.txt"
    texts.write_text("".join(f"sentence number {i} about pooling.\n" for i in range(12)))
    made = poolkit("embed", str(texts), "-o", "v.npy", "--recipe", "cls", cwd=tmp_path)
    assert made.returncode == 0, made.stderr.decode()
    runs = [poolkit("diagnose", str(texts), "v.npy", "--json", "--cache-dir", "c", cwd=tmp_path)
            for _ in range(2)]  # fmt: skip
    for run in runs:
        assert run.returncode == 0, run.stderr.decode()
    first, second = (json.loads(r.stdout) for r in runs)
    assert first == second and first["best"]["recipe"].startswith("cls")
    assert "0 texts read from the cache" in runs[0].stderr.decode()
    assert " 0 encoded" in runs[1].stderr.decode(), runs[1].stderr.decode()
