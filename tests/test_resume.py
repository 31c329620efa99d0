"""Long jobs survive interruption: the CLI, killed with SIGKILL/SIGINT, then resumed.
The killed runs are their own processes (the signal acts on a process); the others run here.

The job: 2000 real STS-B sentences, 10 parts of 200 (``--max-length 8`` keeps the model
time small; the checkpoint logic does not depend on it). Kill points are found by polling
the work directory for part files, so no test hook exists in the production code; the
mid-part delays come from a seeded RNG. Every resumed output is compared byte for byte
(``.npy``, ``.jsonl``) with an uninterrupted run: the same parts batch alike, so the
promise is the same bytes (docs/equality.md).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import clitools
import numpy as np
import pytest
from testdata import sentences

pytestmark = pytest.mark.slow

N, PART = 2000, 200
OPTIONS = ["--part-size", str(PART), "--max-length", "8"]
WORK = ".poolkit-work"


def command(input_name: str, output: str, *extra: str) -> list[str]:
    """The arguments of ``poolkit embed`` on the job."""
    return ["embed", input_name, "-o", output, *OPTIONS, *extra]


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """An uninterrupted run, in this process."""
    return clitools.run_cli(command(*args), cwd=cwd)


def parts_done(work: Path) -> int:  # parts keep their old file names, chunk-*.npz
    return len(list(work.glob("chunk-*.npz"))) if work.is_dir() else 0


def start_and_kill(cwd: Path, args: list[str], when, sig: int = signal.SIGKILL) -> tuple[int, str]:
    """Start the CLI, poll until ``when(work_dir)`` is true, send ``sig``; (status, stderr)."""
    # SIGINT at its default in the job, as at a terminal: a shell's background job (a CI
    # step started with `&`) inherits it ignored, and Python then keeps ignoring it.
    proc = subprocess.Popen(clitools.command(*command(*args)), cwd=cwd, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    work = cwd / (args[1] + WORK)
    deadline = time.monotonic() + 240
    try:
        while not when(work):
            assert proc.poll() is None, f"finished before the kill point: {proc.stderr.read()}"
            assert time.monotonic() < deadline, "kill point never reached"
            time.sleep(0.002)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err.decode()


def assert_intact(cwd: Path, output: str) -> int:
    """No OUTPUT, and every committed part loads whole; returns the number of parts."""
    assert not (cwd / output).exists(), "a killed job left an OUTPUT"
    work = cwd / (output + WORK)
    for path in work.glob("chunk-*.npz"):
        with np.load(path) as z:
            assert z["s0"].shape == (PART, 384) and np.isfinite(z["s0"]).all()
    return parts_done(work)


def resumed_texts(stderr: str) -> int:
    # The summary line counts what was taken from the checkpoint instead of recomputed.
    marker = " texts resumed from the checkpoint"
    if marker not in stderr:
        return 0
    return int(stderr.split(marker)[0].rsplit("; ", 1)[1])


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The input and an uninterrupted run's outputs (.npy)."""
    cwd = tmp_path_factory.mktemp("resume")
    texts = sentences(N)
    (cwd / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    clean = run(cwd, "in.txt", "clean.npy")
    assert clean.returncode == 0, clean.stderr.decode()
    assert sorted(p.name for p in cwd.iterdir()) == [
        "clean.npy",
        "clean.npy.poolkit.json",
        "in.txt",
    ]
    return cwd


def test_sigkill_at_several_points_then_resume_is_byte_identical(job: Path):
    rng = random.Random(20261130)
    out = "killed.npy"
    tried = []

    # 1. Right after the first part is committed.
    status, _ = start_and_kill(job, ["in.txt", out], lambda w: parts_done(w) >= 1)
    assert status == -signal.SIGKILL
    tried.append(assert_intact(job, out))

    # 2. Mid-part, twice: a random moment after some part appears.
    for _ in range(2):
        target, delay = tried[-1] + rng.randint(1, 3), rng.uniform(0.05, 1.0)
        seen: dict[str, float] = {}

        def mid_part(
            w: Path, target: int = target, delay: float = delay, seen: dict = seen
        ) -> bool:
            if parts_done(w) < target:
                return False
            seen.setdefault("t", time.monotonic())
            return time.monotonic() - seen["t"] > delay

        status, _ = start_and_kill(job, ["in.txt", out, "--resume"], mid_part)
        assert status == -signal.SIGKILL
        tried.append(assert_intact(job, out))
        assert tried[-1] >= target

    # 3. The moment the last part is committed: the final assembly and rename.
    last = N // PART
    status, _ = start_and_kill(job, ["in.txt", out, "--resume"], lambda w: parts_done(w) >= last)
    assert status in (-signal.SIGKILL, 0)
    if (job / out).exists():  # the kill came after the atomic rename: OUTPUT is complete
        assert (job / out).read_bytes() == (job / "clean.npy").read_bytes()
        (job / out).unlink()  # make the resume below do the final write again
    else:
        tried.append(assert_intact(job, out))

    before = parts_done(job / (out + WORK))
    final = run(job, "in.txt", out, "--resume")
    assert final.returncode == 0, final.stderr.decode()
    # Only work that was not committed is recomputed.
    assert resumed_texts(final.stderr.decode()) == before * PART
    assert (job / out).read_bytes() == (job / "clean.npy").read_bytes()
    assert not (job / (out + WORK)).exists()
    print(f"kill points (parts done at each kill): {tried}")


def test_sigkill_while_the_jsonl_output_is_assembled(job: Path):
    texts = (job / "in.txt").read_text(encoding="utf-8").splitlines()[: 3 * PART]
    (job / "small.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = "killed.jsonl"
    work = job / (out + WORK)

    def assembling(w: Path) -> bool:
        # The output is assembled in the work directory as parts are committed, under the
        # writer's temporary name: kill it there, with one or two of the three parts in.
        return w.is_dir() and 0 < parts_done(w) < 3 and any(w.glob(".assembled.jsonl.*"))

    status, _ = start_and_kill(job, ["small.txt", out], assembling)
    assert status == -signal.SIGKILL
    done = assert_intact(job, out)
    assert done in (1, 2)
    final = run(job, "small.txt", out, "--resume")  # reads the done parts back, once
    assert final.returncode == 0, final.stderr.decode()
    assert resumed_texts(final.stderr.decode()) == done * PART and not work.exists()
    # The same parts as the long job's first three: the same texts give the same bits.
    clean = np.load(job / "clean.npy")[: 3 * PART]
    rows = [json.loads(line) for line in (job / out).read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(3 * PART))
    np.testing.assert_array_equal(np.array([r["mean"] for r in rows], np.float32), clean)


def test_sigint_exits_130_with_checkpoint_intact_and_resumes(job: Path):
    texts = (job / "in.txt").read_text(encoding="utf-8").splitlines()[: 3 * PART]
    (job / "small.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    out = "interrupted.npy"
    status, err = start_and_kill(
        job, ["small.txt", out], lambda w: parts_done(w) >= 1, signal.SIGINT
    )
    assert status == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("poolkit: interrupted;") and "--resume" in lines[0]
    kept = assert_intact(job, out)
    assert kept >= 1
    assert not list((job / (out + WORK)).glob("*.tmp"))
    final = run(job, "small.txt", out, "--resume")
    assert final.returncode == 0, final.stderr.decode()
    assert resumed_texts(final.stderr.decode()) == kept * PART
    # The same first parts as the long job: the same texts give the same bits.
    np.testing.assert_array_equal(np.load(job / out), np.load(job / "clean.npy")[: 3 * PART])


def test_changed_input_or_settings_are_refused_on_resume(job: Path, tiny_dirs):
    out = "changed.npy"
    status, _ = start_and_kill(job, ["in.txt", out], lambda w: parts_done(w) >= 1)
    assert status == -signal.SIGKILL
    texts = (job / "in.txt").read_text(encoding="utf-8").splitlines()
    texts[5] = texts[5] + " (edited)"
    (job / "edited.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    cases = [
        (
            ["edited.txt", out, "--resume"],
            "Expected the input of the part already embedded, but texts",
        ),
        (["in.txt", out, "--resume", "-s", "cls"], 'strategies: ["mean"] then, ["cls"] now'),
        (["in.txt", out, "--resume", "--no-normalize"], "normalize: [true] then, [false] now"),
        # The budget actually used is recorded (it was the Encoder's default, whatever the flag).
        (["in.txt", out, "--resume", "--batch-tokens", "512"], "batch_tokens: 2048 then, 512 now"),
        (
            ["in.txt", out, "--resume", "--exclude-special"],
            'recipes: ["mean"] then, ["mean_no_special"] now',
        ),
        (["in.txt", out, "--resume", "--model", str(tiny_dirs["bert_plain"])], "model_files: "),
        (["in.txt", out], "Add --resume to continue it"),
    ]
    for args, fragment in cases:
        r = run(job, *args)
        err = r.stderr.decode()
        assert r.returncode == 2 and fragment in err and err.count("\n") == 1, err
        assert "Traceback" not in err
    assert parts_done(job / (out + WORK)) >= 1 and not (job / out).exists()
    if os.environ.get("POOLKIT_KEEP_TEST_WORK") is None:
        import shutil

        shutil.rmtree(job / (out + WORK))


@pytest.mark.parametrize("fmt", ["parquet", "npz"])
def test_sigkill_then_resume_a_ragged_output_is_byte_identical(job: Path, fmt: str):
    # A multi-vector job (one row of token vectors per text; Parquet with each token's
    # offsets): killed after a part and again mid-part, resumed, the same bytes as a clean run.
    extra = ["--recipe", "multivector:tokens/l2"]
    extra += ["--token-offsets"] if fmt == "parquet" else []
    clean = run(job, "in.txt", f"tokens.{fmt}", *extra)
    assert clean.returncode == 0, clean.stderr.decode()
    out = f"killed-tokens.{fmt}"
    status, _ = start_and_kill(job, ["in.txt", out, *extra], lambda w: parts_done(w) >= 1)
    assert status == -signal.SIGKILL
    seen: dict[str, float] = {}

    def mid_part(w: Path) -> bool:  # a moment after the third part is committed
        if parts_done(w) < 3:
            return False
        return time.monotonic() - seen.setdefault("t", time.monotonic()) > 0.3

    status, _ = start_and_kill(job, ["in.txt", out, *extra, "--resume"], mid_part)
    assert status == -signal.SIGKILL and not (job / out).exists()
    work = job / (out + WORK)
    before = parts_done(work)
    assert before >= 3
    for path in work.glob("chunk-*.npz"):  # each committed part whole: token rows, 384 wide
        with np.load(path) as z:
            assert z["s0"].shape[1] == 384 and len(z["s0"]) > PART and np.isfinite(z["s0"]).all()
    final = run(job, "in.txt", out, *extra, "--resume")
    assert final.returncode == 0, final.stderr.decode()
    assert resumed_texts(final.stderr.decode()) == before * PART
    assert (job / out).read_bytes() == (job / f"tokens.{fmt}").read_bytes()
    assert not work.exists()
