"""Hostile environments, through the CLI: damaged checkpoints and caches, SIGTERM,
full disks, inputs changing under the job.

The job: 400 generated sentences, 8 parts of 50, ``--max-length 16`` (the checkpoint
logic does not depend on model time). Faults are made for real: bytes overwritten in
files, ``kill``/``SIGTERM`` sent to the process, a file size limit (``RLIMIT_FSIZE``) set
in the child so that its writes fail with ``EFBIG``. Every repaired run is compared byte
for byte with an uninterrupted run. A command that is signalled, limited or raced runs as
its own process (the process is what those faults act on); the others run in this one.
"""

from __future__ import annotations

import os
import random
import re
import resource
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import clitools
import numpy as np
import pytest

pytestmark = pytest.mark.slow

N, PART = 400, 50
OPTIONS = ["--part-size", str(PART), "--max-length", "16"]
WORK = ".poolkit-work"
_WORDS = ("river stone light quiet market seven glass winter orange paper engine slow "
          "garden music bright cold window early story north silver train small field").split()  # fmt: skip


def sentences(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12))) for _ in range(n)]


def env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **extra}


def embed_cmd(input_name: str, output: str, *extra: str) -> list[str]:
    """The arguments of ``poolkit embed`` on the job."""
    return ["embed", input_name, "-o", output, *OPTIONS, *extra]


def file_limit(limit: int) -> Callable[[], None]:
    """``preexec_fn``: writes past ``limit`` bytes fail with EFBIG in the child (Python
    ignores SIGXFSZ, so the write returns the error instead of killing the process)."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return apply


def run(cwd: Path, args: list[str], limit: int | None = None, **kw) -> subprocess.CompletedProcess:
    """``poolkit ARGS`` in this process; with a file size ``limit``, as its own process (the
    limit binds a process)."""
    if not limit:
        return clitools.run_cli(args, cwd=cwd, env=env(**kw))
    return subprocess.run(
        clitools.command(*args), cwd=cwd, capture_output=True, timeout=300, env=env(**kw),
        preexec_fn=file_limit(limit),
    )  # fmt: skip


def part_files(work: Path) -> list[Path]:  # parts keep their old file names
    return sorted(work.glob("chunk-*.npz")) if work.is_dir() else []


def start_and_signal(cwd: Path, args: list[str], when, sig: int) -> tuple[int, str]:
    """Start the CLI, poll until ``when(cwd)`` is true, send ``sig``; (status, stderr)."""
    proc = subprocess.Popen(clitools.command(*args), cwd=cwd, stderr=subprocess.PIPE, env=env())
    deadline = time.monotonic() + 240
    try:
        while not when(cwd):
            assert proc.poll() is None, f"finished before the signal: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "signal point never reached"
            time.sleep(0.002)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err.decode()


def lines_of(stderr: bytes | str) -> list[str]:
    text = stderr.decode() if isinstance(stderr, bytes) else stderr
    assert "Traceback" not in text, text
    return text.strip().splitlines()


def resumed_texts(stderr: str) -> int:
    marker = " texts resumed from the checkpoint"
    return int(stderr.split(marker)[0].rsplit("; ", 1)[1]) if marker in stderr else 0


def no_debris(cwd: Path) -> None:
    """No temporary file anywhere under ``cwd`` (work directories included)."""
    assert not [p for p in cwd.rglob("*.tmp")], sorted(cwd.rglob("*.tmp"))
    assert not list(cwd.rglob("assembled.*"))


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The input and an uninterrupted run's output, ``clean.npy``."""
    cwd = tmp_path_factory.mktemp("reliability")
    (cwd / "in.txt").write_text("\n".join(sentences(N)) + "\n", encoding="utf-8")
    clean = run(cwd, embed_cmd("in.txt", "clean.npy"))
    assert clean.returncode == 0, clean.stderr.decode()
    return cwd


@pytest.fixture(scope="module")
def stalled(job: Path) -> Path:
    """The work directory of a job whose final write failed for lack of space: the output
    (400 x 384 float32, 614 kB) is over the file size limit, every part (77 kB) under it."""
    out = "stalled.npy"
    r = run(job, embed_cmd("in.txt", out), limit=200_000)
    (line,) = lines_of(r.stderr)
    assert r.returncode == 1, line
    assert f"{out}: cannot write it (file larger than" in line
    assert "it needs 614.5 kB" in line and "8 finished parts are kept" in line, line
    assert not (job / out).exists() and len(part_files(job / (out + WORK))) == 8
    no_debris(job)
    return job / (out + WORK)


def interrupted(stalled: Path, out: str, parts: int) -> Path:
    """A work directory for ``out`` holding parts 0..parts-1, as a killed job leaves it."""
    work = shutil.copytree(stalled, stalled.parent / (out + WORK))
    for path in part_files(work)[parts:]:
        path.unlink()
    assert len(part_files(work)) == parts
    return work


def test_final_write_and_chunk_commit_on_a_full_disk(job: Path, stalled: Path):
    out = "full.npy"
    # 1. The final write failed (the fixture): the parts are kept, nothing else is left.
    # 2. Resumed with parts 6.. gone, under a limit no part fits: the first new commit fails.
    work = interrupted(stalled, out, 6)
    r = run(job, embed_cmd("in.txt", out, "--resume"), limit=50_000)
    (line,) = lines_of(r.stderr)
    assert r.returncode == 1, line
    assert f"{out}{WORK}/chunk-00000006-" in line and "it needs 77.9 kB" in line, line
    assert "6 finished parts are kept" in line and "--resume" in line, line
    assert not (job / out).exists() and len(part_files(work)) == 6
    no_debris(job)

    # 3. Space freed: the same command with --resume finishes, byte for byte.
    r = run(job, embed_cmd("in.txt", out, "--resume"))
    assert r.returncode == 0, r.stderr.decode()
    assert resumed_texts(r.stderr.decode()) == 6 * PART
    assert (job / out).read_bytes() == (job / "clean.npy").read_bytes()
    assert not work.exists()

    # 4. Every part done, only the final write left: nothing is embedded, the output is
    # assembled from the parts, and the summary still gives the vectors' width.
    out = "all-done.npy"
    interrupted(stalled, out, N // PART)
    r = run(job, embed_cmd("in.txt", out, "--resume"))
    assert r.returncode == 0, r.stderr.decode()
    (line,) = lines_of(r.stderr)
    assert resumed_texts(r.stderr.decode()) == N and f"-> {out} [mean=384] in " in line, line
    assert (job / out).read_bytes() == (job / "clean.npy").read_bytes()


def test_damaged_chunks_are_found_before_any_new_work_and_recomputed(job: Path, stalled: Path):
    out = "damaged.npy"
    work = interrupted(stalled, out, 7)
    files = part_files(work)
    flipped, truncated, deleted = files[1], files[3], files[4]
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(
        b ^ 0xFF for b in data[len(data) // 2 :][:64]
    )
    flipped.write_bytes(bytes(data))
    truncated.write_bytes(truncated.read_bytes()[:1000])
    deleted.unlink()
    (work / "notes.txt").write_text("mine")
    (work / "chunk-00000009.npz").write_bytes(b"not poolkit's")  # a name poolkit never writes

    r = run(job, embed_cmd("in.txt", out, "--resume"))
    assert r.returncode == 0, r.stderr.decode()
    lines = lines_of(r.stderr)
    # The checks run when the work directory is opened, before any part is embedded: the
    # repair notices come first, one line per fault, then the summary.
    assert len(lines) == 6 and lines[-1].startswith(f"poolkit: {N} texts -> {out}"), lines
    assert all(line.startswith("poolkit: warning: ") for line in lines[:-1])
    for line, path in zip(lines[:2], (flipped, truncated), strict=True):
        assert f"{out}{WORK}/{path.name}: damaged checkpoint part" in line, line
    assert lines[2].endswith("missing parts 4; they will be recomputed."), lines[2]
    assert "ignoring 2 files poolkit did not write (chunk-00000009.npz, notes.txt)" in lines[3]
    assert "kept, it holds 2 files poolkit did not write" in lines[4], lines[4]
    # 7 parts were there, 3 damaged or gone: 4 resumed, the rest recomputed.
    assert resumed_texts(lines[-1]) == 4 * PART
    assert (job / out).read_bytes() == (job / "clean.npy").read_bytes()
    # Files poolkit did not write are never deleted: the directory keeps only them.
    assert sorted(os.listdir(work)) == ["chunk-00000009.npz", "notes.txt"]
    shutil.rmtree(work)


def test_sigterm_at_a_seeded_random_moment_then_resume(job: Path):
    rng = random.Random(17)
    out = "term.npy"
    work = job / (out + WORK)
    target, delay = rng.randint(1, 6), rng.uniform(0.0, 0.5)
    seen: dict[str, float] = {}

    def moment(cwd: Path) -> bool:
        if len(part_files(work)) < target:
            return False
        seen.setdefault("t", time.monotonic())
        return time.monotonic() - seen["t"] >= delay

    status, err = start_and_signal(job, embed_cmd("in.txt", out), moment, signal.SIGTERM)
    (line,) = lines_of(err)
    assert status == 143, line
    assert line.startswith("poolkit: terminated (SIGTERM); ") and "--resume" in line, line
    kept = len(part_files(work))
    assert kept >= target and not (job / out).exists()
    no_debris(job)
    for path in part_files(work):
        with np.load(path) as z:
            assert z["s0"].shape == (PART, 384) and np.isfinite(z["s0"]).all()

    r = run(job, embed_cmd("in.txt", out, "--resume"))
    assert r.returncode == 0, r.stderr.decode()
    assert resumed_texts(r.stderr.decode()) == kept * PART
    assert (job / out).read_bytes() == (job / "clean.npy").read_bytes()
    print(f"SIGTERM after part {target} + {delay:.2f} s: {kept} parts kept")


def test_sigterm_while_loading_the_model_leaves_nothing(job: Path):
    proc = subprocess.Popen(clitools.command(*embed_cmd("in.txt", "early.npy")), cwd=job,
                            stderr=subprocess.PIPE, env=env())  # fmt: skip
    time.sleep(2.0)  # Python is up; importing torch and loading the model take longer
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    (line,) = lines_of(err)
    assert proc.returncode == 143, line
    assert line == "poolkit: terminated (SIGTERM)", line  # before any work: nothing kept
    assert not [p for p in job.iterdir() if p.name.startswith(("early", ".early"))]


@pytest.mark.parametrize("change", ["append", "truncate", "rewrite slowly"])
def test_input_changed_while_reading_is_reported_then_resumed(job: Path, change: str):
    """With "rewrite slowly" the test empties the file, then writes its first 300 lines
    back in pieces cut mid-line: the job reads a half-written file, and no part of it may
    be checkpointed."""
    texts = (job / "in.txt").read_text(encoding="utf-8").splitlines()
    stem = change.replace(" ", "-")
    name, out = f"{stem}.txt", f"{stem}.npy"
    (job / name).write_text("\n".join(texts) + "\n", encoding="utf-8")
    work = job / (out + WORK)

    def modify(cwd: Path) -> bool:
        if len(part_files(work)) < 1:
            return False
        if change == "append":  # more lines, the same texts again: known vectors
            with open(job / name, "a", encoding="utf-8") as f:
                f.write("\n".join(texts[:PART]) + "\n")
        elif change == "truncate":  # cut after line 300 in one call, the done part intact
            os.truncate(job / name, len(("\n".join(texts[:300]) + "\n").encode()))
        else:
            data = ("\n".join(texts[:300]) + "\n").encode()
            with open(job / name, "wb", buffering=0) as f:
                for piece in range(0, len(data), 997):  # 997: pieces end mid-line
                    f.write(data[piece : piece + 997])
                    time.sleep(0.03)
        return True

    proc = subprocess.Popen(clitools.command(*embed_cmd(name, out)), cwd=job,
                            stderr=subprocess.PIPE, env=env())  # fmt: skip
    try:
        while not modify(job):
            assert proc.poll() is None
            time.sleep(0.002)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    (line,) = lines_of(err)
    assert proc.returncode == 2, line
    grew = "grew from" if change == "append" else "shrank from"
    assert "Expected the input unchanged while it was being read" in line and grew in line, line
    assert re.search(r"\d+ finished parts? (is|are) kept", line) and not (job / out).exists(), line
    no_debris(job)

    r = run(job, embed_cmd(name, out, "--resume"))
    assert r.returncode == 0, r.stderr.decode()
    clean = np.load(job / "clean.npy")
    expected = np.concatenate([clean, clean[:PART]]) if change == "append" else clean[:300]
    np.testing.assert_array_equal(np.load(job / out), expected)


# --- the ONNX cache ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def onnx_export(tmp_path_factory: pytest.TempPathFactory, job: Path) -> tuple[Path, Path]:
    """One MiniLM export in a cache folder of its own, and a clean ONNX run's output."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    cache = tmp_path_factory.mktemp("onnx_cache")
    (job / "small.txt").write_text("\n".join(sentences(100, seed=1)) + "\n", encoding="utf-8")
    r = run(job, embed_cmd("small.txt", "onnx-clean.npy", "--backend", "onnx"),
            POOLKIT_CACHE=str(cache))  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    return cache, job / "onnx-clean.npy"


@pytest.mark.parametrize("damage", ["overwrite 240 kB mid-graph", "truncate"])
def test_damaged_onnx_cache_is_rebuilt_with_one_warning(job, onnx_export, tmp_path, damage):
    cache = shutil.copytree(onnx_export[0], tmp_path / "cache")
    (model,) = cache.glob("onnx/*/model.onnx")
    good = model.read_bytes()
    if damage == "truncate":
        model.write_bytes(good[: len(good) // 3])
    else:
        with open(model, "r+b") as f:
            f.seek(len(good) // 2)
            f.write(random.Random(5).randbytes(240_000))
    out = f"onnx-{damage.split()[0]}.npy"
    r = run(job, embed_cmd("small.txt", out, "--backend", "onnx"), POOLKIT_CACHE=str(cache))
    assert r.returncode == 0, r.stderr.decode()
    warning, summary = lines_of(r.stderr)
    assert warning.startswith(f"poolkit: warning: {model}: damaged ONNX cache file"), warning
    assert "rebuilding the cache entry" in warning and summary.startswith("poolkit: 100 texts")
    assert (job / out).read_bytes() == onnx_export[1].read_bytes()
    assert model.read_bytes() == good  # the export is deterministic: rebuilt as it was
    assert [p.name for p in (cache / "onnx").iterdir()] == [model.parent.name]


# --- compare writes on a full disk -------------------------------------------------------


@pytest.mark.parametrize(("flag", "name", "limit"), [("--json", "c.json", 64), ("--plot", "c.png", 4096), ("--report", "c.html", 4096)])  # fmt: skip
def test_compare_outputs_on_a_full_disk(tmp_path, flag, name, limit):
    rows = [f"{i % 2} {text}" for i, text in enumerate(sentences(20, seed=2))]
    (tmp_path / "c.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    # The cache's own full disk: test_a_token_state_cache_that_cannot_be_written_...
    cmd = ["compare", "c.txt", "--task", "classification", "--strategies", "mean", flag, name,
           "--quiet", "--no-cache"]  # fmt: skip
    r = run(tmp_path, cmd, limit=limit)
    (line,) = lines_of(r.stderr)
    assert r.returncode == 1, line
    assert f"{name}: cannot write it (file larger than" in line, line
    assert "it needs at least" in line or flag in ("--json", "--report"), line  # exact sizes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt"]


def test_a_token_state_cache_that_cannot_be_written_costs_one_warning(tmp_path):
    """The cache only saves time: on a full disk the run warns once and goes on."""
    rows = [f"{i % 2} {text}" for i, text in enumerate(sentences(20, seed=2))]
    (tmp_path / "c.txt").write_text("\n".join(rows) + "\n", encoding="utf-8")
    cmd = ["compare", "c.txt", "--task", "classification", "--strategies", "mean", "--json",
           "c.json", "--quiet", "--cache-dir", "states"]  # fmt: skip
    r = run(tmp_path, cmd, limit=8192)  # the JSON fits, a shard of states does not
    assert r.returncode == 0, r.stderr.decode()
    warning = [x for x in lines_of(r.stderr) if "token-state cache cannot be written" in x]
    assert len(warning) == 1 and "goes on without saving states" in warning[0], r.stderr
    assert not list((tmp_path / "states").glob("states/v1/*/*.pks"))
    assert not list((tmp_path / "states").glob("states/v1/*/.*.tmp"))
