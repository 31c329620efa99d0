"""``poolkit embed DIR -o OUT --engine ray`` stopped mid-job (``kill -9`` of the driver,
SIGTERM), then ``--resume``: only the unfinished input files are embedded again, and the
published shards equal a clean run's, byte for byte (the same blocks batch alike:
docs/equality.md).

The SIGTERM from outside embeds with all-MiniLM-L6-v2, slow enough to be stopped between two
finished files; the other cases stop at a known place (a driver that stops itself once it
has recorded an input file done) and use tiny random models (``tests/tiny_models.py``): what
they check is that a resumed job's bytes are an uninterrupted job's, which does not depend
on the weights. Each Ray job costs about 20 s of start-up (a driver, actors importing torch),
so each case is one clean run, one stopped run and one resume. One local Ray (2 CPUs,
conftest's ``ray_cluster``) serves the module; every command joins it with ``--address`` as
a real subprocess where the process is what is checked (stopped by a signal), else in
this process.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import clitools
import pytest
from testdata import sentiment_lines, sts_sentences

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
FILES = 6
# Rows per file: with --part-size 32, 2 workers make blocks of 30 rows (about 4 blocks per
# worker), 1 worker blocks of 32: a resume with --workers 1 must still cut 30.
ROWS = 40


@pytest.fixture
def ray_address(ray_cluster) -> str:
    return ray_cluster.get_runtime_context().gcs_address


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six text files of 40 real sentences each."""
    texts = sts_sentences() + [text for _, text in sentiment_lines()]
    assert len(texts) >= FILES * ROWS
    path = tmp_path_factory.mktemp("inputs")
    for k in range(FILES):
        part = texts[k * ROWS : (k + 1) * ROWS]
        (path / f"f{k}.txt").write_text("".join(t + "\n" for t in part), encoding="utf-8")
    return path


def _argv(
    folder: Path, out: Path, address: str, model: Path, *extra: str, workers: int = 2
) -> list[str]:
    return [*clitools.command(), "embed", str(folder), "-o", str(out),
            "--engine", "ray", "--address", address, "--workers", str(workers),
            "--part-size", "32", "--model", str(model), *extra]  # fmt: skip


def _poolkit(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """``argv`` (from :func:`_argv`) in this process, on its Ray connection (the command
    keeps it), its output as text: what is checked here is the job's files and lines, and a
    process's start-up (importing torch and Ray Data) costs seconds. The stopped runs are
    processes of their own (:func:`_stopping`)."""
    result = clitools.run_cli(argv[len(clitools.command()) :], cwd=REPO)
    return subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode(), result.stderr.decode()
    )


@pytest.fixture(scope="module")
def tiny(tiny_dirs) -> Path:
    """A tiny random BERT with MiniLM's tokenizer, no sentence-transformers files."""
    return tiny_dirs["bert_plain"]


@pytest.fixture(scope="module")
def clean(ray_cluster, folder, minilm_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("clean") / "out"
    address = ray_cluster.get_runtime_context().gcs_address
    run = _poolkit(_argv(folder, out, address, minilm_dir, "--quiet"))
    assert run.returncode == 0, run.stderr
    return out


def _records(work: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(work.glob("file-*.json"))]


def _same_as_clean(out: Path, clean: Path) -> None:
    """Same shard names and bytes (so the same blocks), and every column the same."""
    import pyarrow.dataset as pads

    names = sorted(p.name for p in clean.iterdir())
    assert len(names) == 2 * FILES  # blocks of 30 and 10 rows per file
    assert sorted(p.name for p in out.iterdir()) == names
    want = pads.dataset(clean, format="parquet").to_table()
    got = pads.dataset(out, format="parquet").to_table()
    assert got.column_names == want.column_names
    for column in want.column_names:
        assert got[column].to_pylist() == want[column].to_pylist(), column
    for name in names:
        assert (out / name).read_bytes() == (clean / name).read_bytes(), name


def test_killed_driver_resumes_with_only_the_unfinished_files(ray_address, folder, tiny, tmp_path):
    """``kill -9`` of the driver of a late-chunked int8 job (ranges from --calibrate) after
    two input files are recorded done; one of their shards damaged, an orphan shard and a
    file of the user's beside them: other settings are refused, the resume recomputes the
    damaged file and the unfinished ones, links the intact file's shards, and publishes a
    clean run's bytes (one row per chunk, its document's id on it; int8 bytes)."""
    import pyarrow.dataset as pads

    calib = tmp_path / "calib.txt"
    calib.write_text("".join(t + "\n" for _, t in sentiment_lines()[-30:]), encoding="utf-8")
    flags = [*_CHUNKS_INT8, str(calib), "--quiet"]
    clean, out = tmp_path / "clean", tmp_path / "out"
    assert _poolkit(_argv(folder, clean, ray_address, tiny, *flags)).returncode == 0
    work = tmp_path / "out.poolkit-work"
    argv = _argv(folder, out, ray_address, tiny, *flags)
    killed = _stopping(argv, files=2, sig=signal.SIGKILL)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    done = _records(work)
    assert len(done) == 2
    assert not out.exists()

    # Damage: one recorded shard bit-flipped; a shard no record names; a file of the user's.
    shard = work / done[0]["shards"][0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(b ^ 0xFF for b in data[len(data) // 2 : len(data) // 2 + 64])  # fmt: skip
    shard.write_bytes(bytes(data))
    orphan = f"part-{hashlib.sha256(b'not a shard').hexdigest()}.parquet"
    (work / orphan).write_bytes(b"not a shard")
    (work / "notes.txt").write_text("mine\n")

    # The shards of the file left intact, by inode: the resumed output links them.
    intact = {(work / s).stat().st_ino for r in done[1:] for s in r["shards"]}

    # Other settings are refused in one line, and the checkpoint is left as it was.
    before = sorted(p.name for p in work.iterdir())
    other = _poolkit([*argv, "--resume", "--max-length", "64"])
    assert other.returncode == 2, other.stderr
    assert other.stderr.strip().splitlines()[-1] == (
        f"poolkit: error: {work}: Expected the settings the checkpoint was made with, but they "
        "differ (max_length: null then, 64 now). Rerun with the original settings, or delete the "
        "directory to start over."
    ), other.stderr
    assert "Traceback" not in other.stderr
    assert sorted(p.name for p in work.iterdir()) == before and not out.exists()

    resumed = _poolkit([*argv[:-1], "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    lines = [line for line in resumed.stderr.splitlines() if line.startswith("poolkit:")]
    assert any("damaged shards" in line and shard.name in line for line in lines), lines
    assert any("no finished input file" in line and orphan in line for line in lines), lines
    assert any("notes.txt" in line and "did not write" in line for line in lines), lines
    # The damaged file and the files never finished were embedded again; the rest was not.
    summary = lines[-1]
    assert summary.startswith(f"poolkit: {FILES * ROWS} texts -> {out}/"), summary
    assert summary.endswith(f"(Ray); {ROWS} texts resumed from the checkpoint"), summary
    _same_as_clean(out, clean)
    assert intact and intact <= {p.stat().st_ino for p in out.iterdir()}  # linked, not redone
    # The user's file is kept: the work directory stays with only it.
    assert sorted(p.name for p in work.iterdir()) == ["notes.txt"]
    table = pads.dataset(out, format="parquet").to_table()
    assert table.num_rows > FILES * ROWS and table.column("mean/int8").type.value_type == "int8"
    assert sorted(set(table["id"].to_pylist())) == list(range(FILES * ROWS))


def test_sigterm_stops_the_ray_job_cleanly_and_resume_finishes(
    ray_address, folder, minilm_dir, clean, tmp_path
):
    import pyarrow.dataset as pads

    out = tmp_path / "out"
    work = tmp_path / "out.poolkit-work"
    argv = _argv(folder, out, ray_address, minilm_dir, "--quiet")
    # SIGTERM right after the second input file is recorded done: a stop midway whatever
    # the machine's speed (a signal sent from outside on the first record raced the last
    # files on a fast machine).
    stopped = _stopping(argv, files=2, sig=signal.SIGTERM)
    stderr = stopped.stderr
    assert stopped.returncode == 143, stderr
    assert "Traceback" not in stderr
    done = _records(work)
    assert len(done) == 2
    assert stderr.strip().splitlines()[-1] == (
        f"poolkit: terminated (SIGTERM); {len(done)} finished input "
        f"file{'s' if len(done) > 1 else ''} kept in {work}: rerun the same command with "
        "--resume to continue."
    )
    # Nothing half-written is visible: no output folder, no staging or temporary files.
    assert not out.exists()
    assert sorted(os.listdir(tmp_path)) == ["out.poolkit-work"]
    assert not [p for p in work.iterdir() if p.name.endswith(".tmp") or p.is_dir()]

    # Resumed on a smaller pool: the blocks (so the batches) are still the first run's.
    resumed = _poolkit(_argv(folder, out, ray_address, minilm_dir, "--resume", workers=1))
    assert resumed.returncode == 0, resumed.stderr
    assert f"{len(done) * ROWS} texts resumed" in resumed.stderr
    _same_as_clean(out, clean)
    ids = pads.dataset(out, format="parquet").to_table()["id"].to_pylist()
    assert sorted(ids) == list(range(FILES * ROWS))  # every row once, with its own id
    assert not work.exists()


# Runs `poolkit ARGS` with a driver that sends itself SIG right after the FILES-th input file
# is recorded done: a stop at a known place, whatever the speed of the model.
_STOP_AFTER = """
import os, signal, sys
from poolkit.io.shardset import ShardCheckpoint
finish = ShardCheckpoint.finish
done = []
def counted(self, stamp, shards):
    finish(self, stamp, shards)
    if stamp["rows"]:
        done.append(stamp)
        if len(done) == {files}:
            os.kill(os.getpid(), {sig})
ShardCheckpoint.finish = counted
from poolkit.cli import process_main
process_main(sys.argv[1:])
"""


def _stopping(argv: list[str], files: int, sig: int) -> subprocess.CompletedProcess[str]:
    """``argv`` (a `poolkit embed` command) with a driver that stops itself with ``sig`` once
    ``files`` input files are recorded done."""
    code = _STOP_AFTER.format(files=files, sig=int(sig))
    return subprocess.run([sys.executable, "-c", code, *argv[len(clitools.command()):]],
                          capture_output=True, text=True, cwd=REPO, timeout=300)  # fmt: skip


# Late chunks (three or so a text) stored as int8 with ranges from --calibrate FILE.
_CHUNKS_INT8 = ("--chunks", "tokens:6", "--late", "--recipe", "mean/int8", "--calibrate")


# A sparse recipe stands for the ragged output kinds: the resume (checkpoint records, shard
# names, publishing) is the driver's and has no branch by kind, and a multi-vector recipe's
# rows on Ray are test_ray.py's test_sparse_and_multivector_recipes_give_the_local_rows'
# (a multivector:tokens/pool2 case here ran the same resume at ~90 s of the CI's time).
def test_a_sparse_job_resumes_to_a_clean_runs_bytes(ray_address, folder, tmp_path):
    import warnings

    from tiny_models import build_mlm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = build_mlm("bert_dense", tmp_path / "model")
    flags = ["--recipe", "splade/top16"]
    clean, out = tmp_path / "clean", tmp_path / "out"
    assert _poolkit(_argv(folder, clean, ray_address, model, *flags, "-q")).returncode == 0
    argv = _argv(folder, out, ray_address, model, *flags)
    stopped = _stopping([*argv, "-q"], files=1, sig=signal.SIGTERM)
    # The job stops in one line with its checkpoint kept. (Its exit status is 143, though Ray
    # has been seen to end the process with 1 after that line when stopped mid-stream: the
    # exit status of a stopped job is test_sigterm_stops_the_ray_job_cleanly_and_resume_finishes'.)
    assert stopped.returncode in (143, 1), stopped.stderr
    stop = "poolkit: terminated (SIGTERM); 1 finished input file kept in "
    assert [x for x in stopped.stderr.splitlines() if x.startswith("poolkit:")] == [
        next(x for x in stopped.stderr.splitlines() if x.startswith(stop))
    ], stopped.stderr
    assert len(_records(tmp_path / "out.poolkit-work")) == 1 and not out.exists()
    resumed = _poolkit([*argv, "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.strip().endswith(f"(Ray); {ROWS} texts resumed from the checkpoint")
    _same_as_clean(out, clean)
