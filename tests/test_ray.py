"""Ray Data integration: same ids and vectors as one machine, through the library and the
CLI, with a worker process killed mid-job; and one clear line when Ray is missing.

One local Ray (2 CPUs, small object store: conftest's ``ray_cluster``) serves the Ray
tests. A CLI job runs in this process, which is that Ray's driver, with ``--address`` its
own (the command keeps the connection: ``_in_process``); where the process itself is
checked (the first CLI run, ``--quiet``'s whole stderr) it runs as a process of its own
joining the cluster (``_poolkit``). The reference is ``poolkit.embed`` on one machine over
texts read here with plain Python (not poolkit's readers).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import clitools
import numpy as np
import pytest
from equality import BOUND
from testdata import fixture, read_sts_pairs, sentiment_lines, sts_pairs_table, sts_sentences

from poolkit.ray import Embedder

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TOL = BOUND  # docs/equality.md: Ray batches otherwise (observed max 2.8e-7)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A folder of three formats (350 real texts) and its texts in sorted-file order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("corpus")
    sts = sts_sentences()
    a = [text for _, text in sentiment_lines()][:120]
    b, c = sts[:115], sts[115:230]
    (folder / "a.txt").write_text("".join(t + "\n" for t in a), encoding="utf-8")
    with open(folder / "b.jsonl", "w", encoding="utf-8") as f:
        for t in b:
            f.write(json.dumps({"text": t, "source": "sts-dev"}) + "\n")
    pq.write_table(pa.table({"text": c}), folder / "c.parquet", row_group_size=30)
    (folder / "_SUCCESS").write_text("")  # markers are not data
    return folder, a + b + c


@pytest.fixture(scope="module")
def reference(corpus: tuple[Path, list[str]], minilm) -> np.ndarray:
    import poolkit

    return poolkit.embed(corpus[1], minilm)


def _rows(table) -> tuple[np.ndarray, np.ndarray, list[str]]:
    order = np.argsort(table["id"].to_numpy())
    ids = table["id"].to_numpy()[order]
    vectors = np.stack(table["mean"].to_numpy(zero_copy_only=False))[order]
    text_ids = [table["text_id"][int(i)].as_py() for i in order]
    return ids, vectors, text_ids


def _expected_text_ids() -> list[str]:
    return (
        [f"a.txt:{r}" for r in range(120)]
        + [f"b.jsonl:{r}" for r in range(115)]
        + [f"c.parquet:{r}" for r in range(115)]
    )


def _collect(ray, ds):
    import pyarrow as pa

    return pa.concat_tables(ray.get(list(ds.to_arrow_refs())))


class _VictimEmbedder(Embedder):
    """The real Embedder; the first actor to reach its second batch writes its PID to a
    file and waits there to be killed by the test (a restarted actor does not)."""

    def __init__(self, *args, marker: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.marker = marker
        self.calls = 0

    def __call__(self, batch):
        self.calls += 1
        if self.calls == 2:
            try:
                fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass
            else:
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                time.sleep(120)  # the test kills this process here, mid-batch
        return super().__call__(batch)


def test_library_matches_one_machine_with_a_worker_killed(
    ray_cluster, corpus, reference, minilm_dir, tmp_path
):
    """``embed_dataset`` over a folder of three formats, one actor's process killed with
    SIGKILL mid-batch: every row once, with its id, text id, text and the one-machine
    vector (one job checks both: a Ray job costs about 20 s of start-up)."""
    import ray.cloudpickle

    from poolkit.ray import Corpus, embed_dataset

    # Workers cannot import this test module: ship the subclass by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    folder, texts = corpus
    marker = tmp_path / "victim.pid"
    killed: list[int] = []

    def killer() -> None:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            if marker.exists() and marker.read_text():
                pid = int(marker.read_text())
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    scanned = Corpus.scan(folder)
    assert [f.name for f in scanned.files] == ["a.txt", "b.jsonl", "c.parquet"]
    assert scanned.counts == [120, 115, 115]
    ds = embed_dataset(scanned.dataset(block_rows=25), minilm_dir, workers=2, batch_size=25,
                       keep_text=True, fn=_VictimEmbedder, marker=str(marker))  # fmt: skip
    table = _collect(ray_cluster, ds)
    thread.join(timeout=5)
    assert killed, "no actor reached its second batch"
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0], 0)
    ids, vectors, text_ids = _rows(table)
    assert table.num_rows == len(texts)  # nothing duplicated
    np.testing.assert_array_equal(ids, np.arange(len(texts)))  # nothing lost
    assert text_ids == _expected_text_ids()
    order = np.argsort(table["id"].to_numpy())
    assert [table["text"][int(i)].as_py() for i in order] == texts
    assert table.schema.field("mean").type.list_size == 384
    assert np.abs(vectors - reference).max() < TOL


def _poolkit(*args: str) -> subprocess.CompletedProcess[str]:
    """A command run as its own process, joining the cluster with --address: where what is
    checked is the process's (its whole stderr, its exit status, what --quiet leaves)."""
    return subprocess.run(clitools.command(*args), capture_output=True, text=True, cwd=REPO,
                          timeout=300)  # fmt: skip


def _in_process(*args: str) -> subprocess.CompletedProcess[str]:
    """A command in this process, its output as text: one refused before Ray starts, or a
    job on this process's own Ray connection (the command keeps it: ``_start_ray``), which
    spares a process's start-up (importing torch and Ray Data, several seconds)."""
    result = clitools.run_cli(args, cwd=REPO)
    return subprocess.CompletedProcess(
        result.args, result.returncode, result.stdout.decode(), result.stderr.decode()
    )


def test_cli_matches_one_machine(ray_cluster, corpus, reference, tmp_path):
    import pyarrow.dataset as pads

    folder, _ = corpus
    # `reference`: the same texts embedded on one machine (the one-machine CLI writes these
    # vectors: test_cli.py; every embed flag on both engines: the walk below).
    address = ray_cluster.get_runtime_context().gcs_address
    out = tmp_path / "out"
    run = _poolkit("embed", f"{folder}/*", "-o", str(out), "--engine", "ray",
                   "--address", address, "--workers", "2", "--part-size", "64")  # fmt: skip
    assert run.returncode == 0, run.stderr
    summary = run.stderr.strip().splitlines()[-1]
    assert summary.startswith("poolkit: 350 texts -> ")
    assert "texts/s" in summary and summary.endswith(", 2 workers x 1 CPU (Ray)")
    shards = sorted(out.glob("*.parquet"))
    assert len(shards) > 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no temp left
    assert not (tmp_path / "out.poolkit-work").exists()  # the checkpoint goes once published
    got = pads.dataset(out, format="parquet").to_table()
    assert set(got.column_names) == {"id", "text_id", "mean"}
    ids, vectors, text_ids = _rows(got)
    np.testing.assert_array_equal(ids, np.arange(len(reference)))
    assert text_ids == _expected_text_ids()
    assert np.abs(vectors - reference).max() < TOL
    again = _in_process("embed", str(folder), "-o", str(out), "--engine", "ray",
                     "--address", address)  # fmt: skip
    assert again.returncode == 2
    assert again.stderr.strip() == (
        f"poolkit: error: {out}: already exists and is not empty; pass --overwrite to replace it."
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers", "2"], "--workers works with --engine ray only; add --engine ray or drop it."),
        (["--address", "auto"], "--address works with --engine ray only; add --engine ray or drop it."),
        (["--engine", "ray", "--workers", "0"], "Expected --workers to be a positive integer, but got 0."),
    ],
)  # fmt: skip
def test_cli_flag_errors(tmp_path, argv, message):
    src = tmp_path / "in.txt"
    src.write_text("hello\n", encoding="utf-8")
    result = _in_process("embed", str(src), "-o", str(tmp_path / "out"), *argv)
    assert result.returncode == 2
    assert result.stderr.strip() == f"poolkit: error: {message}"


def test_cli_input_errors(tmp_path):
    out = tmp_path / "out"
    missing = _in_process("embed", str(tmp_path / "nope"), "-o", str(out), "--engine", "ray")
    assert (missing.returncode, missing.stderr.strip()) == (
        2, f"poolkit: error: {tmp_path / 'nope'}: no such file or folder."
    )  # fmt: skip
    stdin = _in_process("embed", "-", "-o", str(out), "--engine", "ray")
    assert stdin.returncode == 2
    assert "cannot read stdin" in stdin.stderr
    (tmp_path / "file.parquet").write_bytes(b"")
    src = tmp_path / "in.txt"
    src.write_text("hello\n", encoding="utf-8")
    to_file = _in_process(
        "embed", str(src), "-o", str(tmp_path / "file.parquet"), "--engine", "ray"
    )
    assert to_file.returncode == 2
    assert "writes a folder of Parquet shards, but this is a file" in to_file.stderr
    assert not out.exists()
    for name in ("out.npy", "out.jsonl"):  # never exit 0 without the file it names
        named = _in_process("embed", str(src), "-o", str(tmp_path / name), "--engine", "ray")
        assert (named.returncode, named.stderr.count("\n")) == (2, 1), named.stderr
        assert named.stderr.startswith(
            f"poolkit: error: {tmp_path / name}: --engine ray writes a folder of Parquet "
            f"shards, not a {name[3:]} file; name a folder (e.g. {tmp_path / 'out'}/)"
        ), named.stderr
        assert not (tmp_path / name).exists()


def test_in_a_ray_driver_the_command_keeps_its_connection(ray_cluster, tmp_path):
    """Run in a process already connected to Ray (as every ``_in_process`` job here), a
    command uses that connection and leaves it up; ``--address`` of another cluster is
    refused in one line, before anything is written."""
    src = tmp_path / "in.txt"
    src.write_text("hello\n", encoding="utf-8")
    other = _in_process("embed", str(src), "-o", str(tmp_path / "out"), "--engine", "ray",
                        "--address", "127.0.0.1:1")  # fmt: skip
    current = ray_cluster.get_runtime_context().gcs_address
    assert (other.returncode, other.stderr) == (2, (
        "poolkit: error: --address 127.0.0.1:1: this process is already connected to the Ray "
        f"cluster at {current}; drop --address, or run poolkit as a process of its own.\n"))  # fmt: skip
    assert ray_cluster.is_initialized() and not (tmp_path / "out").exists()


def test_without_ray_one_line_names_the_install_command(tmp_path):
    """A real interpreter in which ``import ray`` fails (a sitecustomize blocks it)."""
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class _NoRay:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'ray' or name.startswith('ray.'):\n"
        "            raise ModuleNotFoundError(\"No module named 'ray'\", name='ray')\n"
        "        return None\n"
        "sys.meta_path.insert(0, _NoRay())\n",
        encoding="utf-8",
    )
    paths = [str(blocker), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    code = (
        "import poolkit.ray\n"
        "try:\n"
        "    poolkit.ray.Embedder()\n"
        "except poolkit.ray.RayNotInstalledError as e:\n"
        "    print(e)\n"
    )
    lib = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)  # fmt: skip
    assert lib.returncode == 0, lib.stderr
    assert lib.stdout.strip() == (
        "poolkit.ray needs Ray Data, which is not installed: pip install 'poolkit[ray]'"
    )
    src = tmp_path / "in.txt"
    src.write_text("hello\n", encoding="utf-8")
    cli = subprocess.run(
        clitools.command("embed", str(src), "-o", str(tmp_path / "out"), "--engine", "ray"),
        capture_output=True, text=True, env=env, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert cli.returncode == 2
    assert cli.stderr.strip() == (
        "poolkit: error: --engine ray needs Ray Data, which is not installed: "
        "pip install 'poolkit[ray]'"
    )
    assert not (tmp_path / "out").exists()


def test_ray_client_address_without_grpc(tmp_path):
    import importlib.util

    pytest.importorskip("ray")  # without Ray, the missing-Ray line comes first
    if importlib.util.find_spec("grpc") is not None:
        pytest.skip("Ray Client is installed; the message is for when it is not")
    src = tmp_path / "in.txt"
    src.write_text("hello\n", encoding="utf-8")
    result = _in_process("embed", str(src), "-o", str(tmp_path / "out"), "--engine", "ray",
                      "--address", "ray://head:10001")  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "poolkit: error: --address ray://head:10001: ray:// addresses need Ray Client: "
        "pip install 'ray[client]' (or run on the cluster with --address auto)."
    )


# ---------------------------------------------------------------- every embed flag, on Ray

# How each `poolkit embed` option is treated under --engine ray, and the run proving it.
# The walk below fails for an option of the parser that is missing here.
_STAGED = "test_chunks_and_output_stage_give_the_local_rows"
RAY_TREATMENT = {
    "input": "run_a", "--output": "run_a", "--strategy": "run_a",
    "--recipe": "run_b; sparse and multi-vector recipes: "
                "test_sparse_and_multivector_recipes_give_the_local_rows",
    "--normalize": "run_a", "--text-column": "run_a", "--input-format": "run_a",
    "--layers": "run_a", "--exclude-special": "run_a", "--part-size": "run_a",
    "--chunk-size": "run_b (the old, hidden spelling of --part-size)",
    "--overwrite": "run_b", "--backend": "run_c", "--quantize": "run_c", "--calibrate": "run_d",
    "--resume": "test_ray_resume.py", "--prompt": "run_a", "--pooled-only": "run_c",
    "--prompt-name": "test_families_cli.py (the Ray Embedder with a model's named prompt)",
    "--model": "run_a", "--max-length": "run_a", "--device": "run_a", "--dtype": "run_a",
    "--batch-tokens": "run_a", "--long-text": "run_a", "--quiet": "run_a", "--debug": "traceback",
    "--engine": "run_a", "--address": "run_a", "--workers": "run_a", "--cpus-per-worker": "run_a",
    "--gpus-per-worker": "refused on a cluster without GPUs (below; test_gpu_rules.py: without "
                         "a visible GPU, and the placement rule)",
    "--dims": _STAGED, "--precision": _STAGED,
    "--ranges": f"{_STAGED} (a Ray shard's ranges read by --ranges)",
    "--chunks": f"{_STAGED} (column:NAME refused: test_cli_chunks.py)", "--late": _STAGED,
    "--stride": _STAGED, "--chunk-text": _STAGED,
    "--id-column": "test_own_ids_and_kept_fields_travel_as_on_one_machine",
    "--keep-columns": "test_own_ids_and_kept_fields_travel_as_on_one_machine (its own column "
                      "names refused: test_embed_rows.py)",
    "--token-offsets": "refused on --engine ray (test_multivector_cli.py)",
    "--cache": "test_workers_keep_and_read_token_states_in_their_machines_cache",
    "--cache-dir": "test_workers_keep_and_read_token_states_in_their_machines_cache",
    "--cache-size": "the workers' open_state_cache (refused without --cache: "
                    "test_state_cache_cli.py)",
    "--cache-layers": "the workers' open_state_cache (test_state_cache.py)",
    "--cache-dtype": "the workers' open_state_cache (test_state_cache.py)",
    "--fit": "test_a_fitted_recipe_ships_its_fit_to_the_workers",
}  # fmt: skip


def _embed_options() -> set[str]:
    import argparse

    from poolkit.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    embed = sub.choices["embed"]
    return {
        (next(o for o in a.option_strings if o.startswith("--")) if a.option_strings else a.dest)
        for a in embed._actions
        if not isinstance(a, argparse._HelpAction)
    }


def _vectors(path: Path, column: str) -> np.ndarray:
    import pyarrow.dataset as pads

    table = pads.dataset(path, format="parquet").to_table()
    order = np.argsort(table["id"].to_numpy())
    return np.stack(table[column].to_numpy(zero_copy_only=False))[order]


def _ray_and_local(
    tmp_path: Path, name: str, address: str, *flags: str, data: Path | None = None,
    own_process: bool = False,
) -> tuple:  # fmt: skip
    """The same command on one machine (Parquet file) and on Ray (folder): both results.

    Both run in this process (``clitools.run_cli``), the Ray run on this process's Ray
    (``--address`` its own); ``own_process``: the Ray run as a process of its own."""
    data = data or sts_pairs_table(tmp_path / "pairs.tsv")
    local = clitools.run_cli(["embed", str(data), "-o", str(tmp_path / f"{name}.parquet"), *flags],
                             cwd=tmp_path)  # fmt: skip
    assert local.returncode == 0, local.stderr
    ray_out = tmp_path / name
    run = _poolkit if own_process else _in_process
    remote = run("embed", str(data), "-o", str(ray_out), *flags, "--engine", "ray",
                 "--address", address, "--workers", "1", "--cpus-per-worker", "1")  # fmt: skip
    assert remote.returncode == 0, remote.stderr
    return tmp_path / f"{name}.parquet", ray_out, remote


def test_workers_keep_and_read_token_states_in_their_machines_cache(ray_cluster, tmp_path):
    """``--cache`` on Ray: each worker opens the cache root of its own machine (here
    ``--cache-dir``, one machine), writes the states once and reads them the next time."""
    import os

    address = ray_cluster.get_runtime_context().gcs_address
    data = sts_pairs_table(tmp_path / "pairs.tsv")
    root = tmp_path / "states"

    def job(name: str):
        run = _in_process("embed", str(data), "-o", str(tmp_path / name), "--engine", "ray",
                          "--address", address, "--workers", "1", "--cpus-per-worker", "1",
                          "--text-column", "sentence1", "--cache", "--cache-dir", str(root),
                          "--quiet")  # fmt: skip
        assert run.returncode == 0, run.stderr
        return _vectors(tmp_path / name, "mean")

    first = job("a")
    shards = sorted(root.glob("states/v1/*/*.pks"))
    assert shards
    for shard in shards:  # a shard's time is refreshed when it is read
        os.utime(shard, (1, 1))
    np.testing.assert_array_equal(job("b"), first)
    assert sorted(root.glob("states/v1/*/*.pks")) == shards  # nothing encoded again
    assert all(p.stat().st_mtime > 1 for p in shards)  # every shard read


def test_every_embed_flag_is_honoured_or_refused_on_ray(ray_cluster, tmp_path, minilm_dir):
    assert _embed_options() == set(RAY_TREATMENT)
    address = ray_cluster.get_runtime_context().gcs_address
    # run_a: every pooling, reading and encoder flag at a non-default value. The Ray blocks
    # (167 rows / 4) and the local parts are the same 42 texts, so batches match too.
    # The data under a .txt name: only an honoured --input-format reads it as a table.
    sts_pairs_table(tmp_path / "pairs.txt")
    flags = ["--text-column", "sentence2", "--input-format", "tsv", "-s", "cls+mean", "max",
             "--layers", "last4", "--exclude-special", "--no-normalize", "--max-length", "12",
             "--batch-tokens", "96", "--long-text", "window", "--device", "cpu", "--dtype",
             "float32", "--part-size", "42", "--model", str(minilm_dir), "--prompt", "query: ",
             "--quiet"]  # fmt: skip
    local, ray_out, remote = _ray_and_local(tmp_path, "a", address, *flags,
                                            data=tmp_path / "pairs.txt", own_process=True)  # fmt: skip
    # --quiet: no summary, no progress, no Ray execution notes (warnings may still show).
    assert "poolkit:" not in remote.stderr and " INFO " not in remote.stderr, remote.stderr
    # Unnormalised vectors (|x| up to ~10): float noise from other thread counts scales
    # with them, so the bound is 1e-5 here (an ignored flag moves them by > 0.05).
    for column in ("cls+mean", "max"):
        want = _vectors(local, column)
        assert np.abs(_vectors(ray_out, column) - want).max() < 1e-5
    # The flags changed the vectors (so an ignored flag could not pass): plain `mean` differs.
    import poolkit

    texts = [b for _, _, b in read_sts_pairs(fixture("stsb-dev-sample.csv"))]
    plain = poolkit.embed(texts[:5], minilm_dir, "cls+mean")
    assert np.abs(_vectors(local, "cls+mean")[:5] - plain).max() > 0.05

    # run_b: --recipe, two with an output stage (int8, its ranges taken once from
    # --calibrate by the driver; packed bits): the local bytes; --overwrite replacing run_b's
    # folder; --chunk-size, the old spelling of --part-size, is taken by both engines.
    calib = tmp_path / "calib.txt"
    calib.write_text("\n".join(texts[:25]) + "\n", encoding="utf-8")
    staged = ["mean/128/int8", "cls/128/binary"]
    local, ray_out, _ = _ray_and_local(tmp_path, "b", address, "--recipe",
                                       "mean_no_special@first_last/raw", *staged,
                                       "--calibrate", str(calib), "--chunk-size", "42",
                                       "--text-column", "sentence1")  # fmt: skip
    col = "mean_no_special@first_last/raw"
    assert np.abs(_vectors(ray_out, col) - _vectors(local, col)).max() < 1e-5  # /raw
    for col in staged:
        assert _vectors(local, col).dtype == np.int8
        np.testing.assert_array_equal(_vectors(ray_out, col), _vectors(local, col))
    again = _in_process("embed", str(tmp_path / "pairs.tsv"), "-o", str(ray_out), "--recipe", "cls",
                     "--text-column", "sentence1", "--engine", "ray", "--address", address, "--overwrite", "--quiet")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert sorted(_vectors_columns(ray_out)) == ["cls", "id", "text_id"]

    # run_c: the ONNX backend with int8 on the workers, as on one machine; --pooled-only
    # (MiniLM's pipeline after pooling is Normalize: pooled vectors are not unit length).
    local, ray_out, _ = _ray_and_local(tmp_path, "c", address, "--backend", "onnx",
                                       "--quantize", "int8", "--part-size", "42",
                                       "--text-column", "sentence1", "--pooled-only")  # fmt: skip
    int8 = _vectors(local, "mean")
    assert np.abs(_vectors(ray_out, "mean") - int8).max() < 1e-4
    assert np.abs(np.linalg.norm(_vectors(ray_out, "mean"), axis=1) - 1).max() > 0.1
    int8 = int8 / np.linalg.norm(int8, axis=1, keepdims=True)
    fp32 = poolkit.embed([a for _, a, _ in read_sts_pairs(fixture("stsb-dev-sample.csv"))],
                         minilm_dir, "mean")  # fmt: skip
    assert np.abs(int8 - fp32).max() > 1e-3  # int8 is visibly not the torch run

    # run_d: OpenVINO static int8 calibrated on --calibrate FILE: the workers calibrate on the
    # same texts (same cache key), so their vectors are the local run's.
    local, ray_out, _ = _ray_and_local(tmp_path, "d", address, "--backend", "openvino",
                                       "--quantize", "int8-static", "--calibrate", str(calib),
                                       "--part-size", "42", "--text-column", "sentence2")  # fmt: skip
    static = _vectors(local, "mean")
    assert np.abs(_vectors(ray_out, "mean") - static).max() < 1e-4
    assert np.abs(static - poolkit.embed(texts, minilm_dir, "mean")).max() > 1e-3  # int8 ran

    # --gpus-per-worker on a cluster with no GPU resource: one line, after joining it
    # (--quiet: without it Ray's own INFO lines on joining come first).
    if not ray_cluster.cluster_resources().get("GPU"):
        no_gpu = _in_process("embed", str(tmp_path / "pairs.tsv"), "-o", str(tmp_path / "g"),
                          "--engine", "ray", "--address", address, "--gpus-per-worker", "1",
                          "--quiet")  # fmt: skip
        assert no_gpu.returncode == 2 and no_gpu.stderr.count("\n") == 1, no_gpu.stderr
        assert no_gpu.stderr.startswith(
            "poolkit: error: --gpus-per-worker 1: the Ray cluster has no GPU resource;"
        )
        assert not (tmp_path / "g").exists()

    # --debug shows the traceback (here of a --resume into a remote folder, refused).
    refused = _in_process("embed", str(tmp_path / "pairs.txt"), "-o", "s3://bucket/r",
                       "--engine", "ray", "--resume")  # fmt: skip
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert refused.stderr.startswith(
        "poolkit: error: s3://bucket/r: --resume with --engine ray needs a local OUTPUT_DIR"
    )
    debug = _in_process("embed", str(tmp_path / "pairs.txt"), "-o", "s3://bucket/r",
                     "--engine", "ray", "--resume", "--debug")  # fmt: skip
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def _vectors_columns(path: Path) -> list[str]:
    import pyarrow.dataset as pads

    return list(pads.dataset(path, format="parquet").schema.names)


# ---------------------------------------------------------------- one parse per call path


def _count_parses(counter: dict[str, int]):
    """Wrap both strategy parsers (the recipe's and the core's) to count their calls."""
    import poolkit.recipe
    import poolkit.sequence

    originals = {}
    for module, name in ((poolkit.recipe, "_canonical_strategy"),
                         (poolkit.sequence, "parse_sequence_strategy")):  # fmt: skip
        original = getattr(module, name)
        originals[(module, name)] = original

        def spy(*args, _original=original, _name=name, **kwargs):
            counter[_name] = counter.get(_name, 0) + 1
            return _original(*args, **kwargs)

        setattr(module, name, spy)
    return originals


class ParseCountingEmbedder(Embedder):
    """The real Embedder, counting strategy parses inside its actor; each batch reports the
    actor's count so far in a ``parses`` column."""

    def __init__(self, *args, **kwargs):
        self.parses: dict[str, int] = {}
        _count_parses(self.parses)
        super().__init__(*args, **kwargs)

    def __call__(self, batch):
        import pyarrow as pa

        out = super().__call__(batch)
        total = sum(self.parses.values())
        return out.append_column("parses", pa.array([total] * out.num_rows, pa.int64()))


def test_each_strategy_is_parsed_once_on_the_ray_path(ray_cluster, minilm_dir, tmp_path):
    import argparse

    import pyarrow as pa

    # The actors cannot import this test module: ship its spy class by value.
    from ray import cloudpickle

    from poolkit.cli._recipe_args import recipes_from_args
    from poolkit.ray import embed_dataset

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    driver: dict[str, int] = {}
    originals = _count_parses(driver)
    try:
        # The CLI's one parse of its flags, then the job built from the recipes it made.
        args = argparse.Namespace(strategy=["cls+mean", "max"], recipe=None, layers="last4",
                                  exclude_special=True, normalize=None)  # fmt: skip
        wanted, _ = recipes_from_args(args)
        assert driver == {"_canonical_strategy": 2}
        texts = [f"text number {i} with some words" for i in range(40)]
        ds = ray_cluster.data.from_arrow(pa.table({"text": texts, "id": list(range(40))}))
        out = embed_dataset(ds, str(minilm_dir), recipe=wanted, workers=1, batch_size=10,
                            fn=ParseCountingEmbedder)  # fmt: skip
        table = pa.concat_tables(ray_cluster.get(list(out.to_arrow_refs())))
    finally:
        for (module, name), original in originals.items():
            setattr(module, name, original)
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert driver == {"_canonical_strategy": 2}  # embed_dataset took the recipes as they were
    assert table.num_rows == 40 and set(table["parses"].to_pylist()) == {0}  # actors: none
    assert set(table.column_names) >= {"cls+mean", "max"}
    # The shorthand flags reached the vectors: mean over non-special tokens of the last four.
    import poolkit

    want = poolkit.embed(texts, minilm_dir, ["cls+mean", "max"], layers="last4",
                         exclude_special=True)  # fmt: skip
    order = np.argsort(table["id"].to_numpy())
    got = np.stack(table["max"].to_numpy(zero_copy_only=False))[order]
    assert np.abs(got - want["max"]).max() < TOL


# ---------------------------------------------------- sparse and multi-vector recipes on Ray


def _in_row_order(path: Path):
    """A local ``.parquet`` file, or a Ray output folder's shards with rows in input order
    (single-file input: by the row number in ``text_id``)."""
    import pyarrow.dataset as pads

    table = pads.dataset(path, format="parquet").to_table()
    if "text_id" in table.column_names:
        rows = [int(t.rsplit(":", 1)[1]) for t in table["text_id"].to_pylist()]
        table = table.take(np.argsort(rows, kind="stable"))
    return table


def _record(path: Path) -> list[dict]:
    """The ``poolkit`` record of a Parquet file, or of each shard of a folder."""
    import pyarrow.parquet as pq

    files = sorted(path.glob("*.parquet")) if path.is_dir() else [path]
    return [json.loads(pq.read_schema(f).metadata[b"poolkit"]) for f in files]


def test_sparse_and_multivector_recipes_give_the_local_rows(ray_cluster, tmp_path):
    """The same command on both engines: equal ids and term ids, weights and token vectors
    to 1e-6, the same sparse record in every shard (the local file's adds its provenance)."""
    from tiny_models import build_mlm, build_multivector

    address = ray_cluster.get_runtime_context().gcs_address
    mlm = build_mlm("bert_dense", tmp_path / "mlm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mv = build_multivector("bert_dense", tmp_path / "mv_model")
    common = ["--text-column", "sentence1", "--part-size", "42", "--quiet"]
    recipes = ["splade", "splade_sum/top8"]
    local, ray_out, _ = _ray_and_local(tmp_path, "sparse", address, "--model", str(mlm),
                                       "--recipe", *recipes, *common)  # fmt: skip
    want, got = _in_row_order(local), _in_row_order(ray_out)
    assert got.column_names == ["id", "text_id", *want.column_names[1:]]
    assert got["id"].to_pylist() == want["id"].to_pylist() == list(range(167))
    for name in recipes:
        assert got[f"{name}_indices"].to_pylist() == want[f"{name}_indices"].to_pylist()
        a, b = (np.concatenate(t[f"{name}_values"].to_pylist()) for t in (got, want))
        assert a.shape == b.shape and np.abs(a - b).max() <= 1e-6
    columns = _record(local)[0]["columns"]
    assert set(columns) == set(recipes) and columns["splade"]["vocab_size"] > 0
    assert all(r == {"poolkit": _record(local)[0]["poolkit"], "columns": columns}
               for r in _record(ray_out))  # fmt: skip

    # An inference-free model: its queries take the query route (the stored per-term
    # weights, no forward pass) on Ray as on one machine, not the documents' MLM route.
    from sentence_transformers.sparse_encoder import SparseEncoder
    from tiny_models import build_inference_free

    routed = build_inference_free(mlm, tmp_path / "routed_model")
    local, ray_out, _ = _ray_and_local(tmp_path, "routed", address, "--model", str(routed),
                                       "--recipe", "splade", "--prompt-name", "query", *common)  # fmt: skip
    want, got = _in_row_order(local), _in_row_order(ray_out)
    assert got["splade_indices"].to_pylist() == want["splade_indices"].to_pylist()
    assert got["splade_values"].to_pylist() == want["splade_values"].to_pylist()
    weight = SparseEncoder(str(routed), device="cpu")[0].sub_modules["query"][0].weight
    weight = weight.detach().to_dense().numpy()
    for indices, values in zip(got["splade_indices"].to_pylist()[:20],
                               got["splade_values"].to_pylist()[:20], strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(values, np.float32), weight[indices])

    ragged = "multivector:tokens/pool2"
    muvera = "multivector:tokens/muvera:k_sim=3,dim_proj=8,r_reps=2"
    for recipe, side in ((ragged, "document"), (muvera, "query")):
        name = "mv" if recipe == ragged else "muvera"
        local, ray_out, _ = _ray_and_local(tmp_path, name, address, "--model", str(mv),
                                           "--recipe", recipe, "--prompt-name", side, *common)  # fmt: skip
        want, got = _in_row_order(local), _in_row_order(ray_out)
        assert got.schema.field(recipe).type == want.schema.field(recipe).type
        assert got["id"].to_pylist() == want["id"].to_pylist() == list(range(167))
        for a, b in zip(got[recipe].to_pylist(), want[recipe].to_pylist(), strict=True):
            a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
            assert a.shape == b.shape and np.abs(a - b).max() <= 1e-6


# ------------------------------------------------------ the user's ids and fields on Ray


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_own_ids_and_kept_fields_travel_as_on_one_machine(ray_cluster, tmp_path, tiny_dirs):
    """String ids from JSON Lines (with two kept fields) and integer `_id`s from Parquet:
    the local engine's ids, types and fields, the same vectors; duplicate and missing ids
    (across files too) refused in one line naming the row, before any model loads."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    address = ray_cluster.get_runtime_context().gcs_address
    texts = sts_sentences()[:90]
    model = ["--model", str(tiny_dirs["bert_plain"]), "-s", "mean", "--part-size", "30", "-q"]
    rows = [{"id": f"doc-{k}", "url": f"u/{k}", "n": 10 * k, "text": t}
            for k, t in enumerate(texts)]  # fmt: skip
    runs = {
        "jsonl": (_jsonl(tmp_path / "in.jsonl", rows), ["--keep-columns", "url,n"]),
        "parquet": (tmp_path / "in.parquet", []),
    }
    pq.write_table(pa.table({"_id": [7000 + k for k in range(90)], "text": texts}),
                   runs["parquet"][0], row_group_size=25)  # fmt: skip
    for name, (data, flags) in runs.items():
        local, ray_out, _ = _ray_and_local(tmp_path, name, address, *model, *flags, data=data)
        want, got = _in_row_order(local), _in_row_order(ray_out)
        assert got.column_names == ["id", "text_id", *want.column_names[1:]]
        for column in want.column_names[:-1]:  # id, then the kept fields: values and types
            assert got.schema.field(column).type == want.schema.field(column).type, column
            assert got[column].to_pylist() == want[column].to_pylist(), column
        vectors = [np.stack(t["mean"].to_numpy(zero_copy_only=False)) for t in (got, want)]
        assert np.abs(vectors[0] - vectors[1]).max() < TOL
    assert want["id"].to_pylist() == [7000 + k for k in range(90)]
    assert pa.types.is_string(_in_row_order(tmp_path / "jsonl").schema.field("id").type)

    # Across the files of a folder: a duplicate, then a row without its id, named.
    folder = tmp_path / "bad"
    folder.mkdir()
    _jsonl(folder / "a.jsonl", rows[:3])
    _jsonl(folder / "b.jsonl", [rows[3], {**rows[4], "id": "doc-1"}])
    for problem, line in (("Expected a unique id in 'id', but got 'doc-1', also the id of text 1", 2),
                          ("Expected an id in 'id'", 1)):  # fmt: skip
        out = tmp_path / "refused"
        run = _in_process("embed", str(folder), "-o", str(out), "--engine", "ray",
                          "--address", address, *model)  # fmt: skip
        assert run.returncode == 2, run.stderr
        assert run.stderr.count("\n") == 1, run.stderr
        assert run.stderr.startswith(
            f"poolkit: error: {folder / 'b.jsonl'}: line {line}: {problem}"
        )
        assert not out.exists() and not (tmp_path / "refused.poolkit-work").exists()
        _jsonl(folder / "b.jsonl", [{**rows[3], "id": None}, rows[4]])


# ------------------------------------------------- chunks and the output stage on Ray


def test_chunks_and_output_stage_give_the_local_rows(ray_cluster, tmp_path, minilm_dir):
    """``--chunks tokens:64`` naive with ``--dims 128 --precision int8`` (ranges from
    ``--calibrate``) and ``--chunk-text``, and ``--late --stride`` (documents past
    ``--max-length``, read in windows) with a binary recipe: the shards hold the local
    file's rows, the documents' own ids on every chunk row, int8/binary bytes equal and
    floats to 1e-6, and the local file's record (ranges included: ``--ranges`` reads them
    from a shard). Whole texts with int8 and binary recipes: run_b above."""
    import pyarrow as pa

    address = ray_cluster.get_runtime_context().gcs_address
    texts = sts_sentences()
    docs = [" ".join(texts[k : k + 8]) for k in range(0, 320, 8)]  # 40 documents, ~90 tokens
    assert min(len(d.split()) for d in docs) > 40 and max(len(d.split()) for d in docs) > 80
    data = _jsonl(tmp_path / "docs.jsonl",
                  [{"id": f"doc-{k}", "text": d} for k, d in enumerate(docs)])  # fmt: skip
    calib = tmp_path / "calib.txt"
    calib.write_text("".join(t + "\n" for t in texts[320:]), encoding="utf-8")
    # Parts of 10 documents, and Ray blocks of 40 / 4: the same texts share a batch.
    common = ["--model", str(minilm_dir), "--part-size", "10", "-q"]
    runs = {
        "naive": ["--chunks", "tokens:64", "--chunk-text", "--dims", "128", "--precision",
                  "int8", "--calibrate", str(calib)],
        "late": ["--chunks", "tokens:64", "--late", "--stride", "24", "--max-length", "80",
                 "--recipe", "mean", "max/128/binary"],
    }  # fmt: skip
    for name, flags in runs.items():
        local, ray_out, _ = _ray_and_local(tmp_path, name, address, *flags, *common, data=data)
        want, got = _in_row_order(local), _in_row_order(ray_out)
        assert got.column_names == ["id", "text_id", *want.column_names[1:]], name
        assert got.num_rows == want.num_rows
        for column in want.column_names:
            a, b = got.column(column), want.column(column)
            assert a.type == b.type, (name, column)
            if pa.types.is_fixed_size_list(b.type) and pa.types.is_floating(b.type.value_type):
                x, y = (np.stack(c.to_numpy(zero_copy_only=False)) for c in (a, b))
                assert np.abs(x - y).max() <= 1e-6, (name, column)
            else:  # ids, chunk spans and texts, int8 and packed bits: equal
                assert a.to_pylist() == b.to_pylist(), (name, column)
        record = {k: v for k, v in _record(local)[0].items() if k != "provenance"}
        assert all(r == record for r in _record(ray_out)), name
        assert set(want["id"].to_pylist()) == {f"doc-{k}" for k in range(40)}
        assert want.num_rows > 40  # several chunks a document
    source = _record(ray_out)[0]["columns"]["max/128/binary"]
    assert source["dims"] == 128 and source["calibration"] is None
    ranges = _record(tmp_path / "naive")[0]["columns"]["mean/128/int8"]["calibration"]
    assert ranges["source"].startswith(f"--calibrate {calib}")
    # --ranges takes a Ray shard's ranges: the local --calibrate run's bytes again.
    shard = sorted((tmp_path / "naive").glob("*.parquet"))[0]
    flags = [f if f != "--calibrate" else "--ranges" for f in runs["naive"]]
    flags[flags.index("--ranges") + 1] = str(shard)
    again = clitools.run_cli(["embed", str(data), "-o", str(tmp_path / "again.parquet"), *flags,
                              *common], cwd=tmp_path)  # fmt: skip
    assert again.returncode == 0, again.stderr
    column = "mean/128/int8"
    assert (
        _in_row_order(tmp_path / "again.parquet")[column]
        == _in_row_order(tmp_path / "naive.parquet")[column]
    )


def test_a_fitted_recipe_ships_its_fit_to_the_workers(ray_cluster, tmp_path, minilm_dir):
    """``--recipe mean/pca32 mean/pca32/int8 --fit FILE`` (#53): the driver reads the fit
    once and ships it; the shards hold the local file's rows (floats to 1e-6, int8 bytes
    equal) and its record, the fit's digest included; without --fit, one line before Ray."""
    import poolkit

    address = ray_cluster.get_runtime_context().gcs_address
    texts = sts_sentences()
    fit = poolkit.fit(texts[:200], minilm_dir, recipe="mean/pca32")
    fit.save(tmp_path / "pca.safetensors")
    (tmp_path / "calib.txt").write_text("".join(t + "\n" for t in texts[200:260]))
    flags = ["--recipe", "mean/pca32", "mean/pca32/int8", "--fit", str(tmp_path / "pca.safetensors"),
             "--calibrate", str(tmp_path / "calib.txt"), "--model", str(minilm_dir), "--part-size", "42",
             "--text-column", "sentence1", "-q"]  # fmt: skip
    local, ray_out, _ = _ray_and_local(tmp_path, "fitted", address, *flags)
    want = _in_row_order(local)
    got = _in_row_order(ray_out)
    x, y = (np.stack(t["mean/pca32"].to_numpy(zero_copy_only=False)) for t in (got, want))
    assert x.shape[1] == 32 and np.abs(x - y).max() <= 1e-6
    assert got["mean/pca32/int8"].to_pylist() == want["mean/pca32/int8"].to_pylist()
    record = {k: v for k, v in _record(local)[0].items() if k != "provenance"}
    assert all(r == record for r in _record(ray_out))
    assert record["columns"]["mean/pca32"]["fit"]["digest"] == fit.digest()
    refused = _in_process("embed", str(tmp_path / "pairs.tsv"), "-o", str(tmp_path / "no"),
                          "--recipe", "mean/pca32", "--engine", "ray", "--address", address)  # fmt: skip
    assert refused.returncode == 2 and "--fit" in refused.stderr, refused.stderr


def test_chunk_and_width_checks_refuse_before_ray_starts(tmp_path, minilm_dir):
    """The local engine's checks that need the model run in the driver: one line each, as
    on one machine, and nothing written (a worker failing to start would print a Ray
    traceback)."""
    data = _jsonl(tmp_path / "docs.jsonl", [{"text": "A short document."}])
    for flags, message in (
        (["--chunks", "tokens:9999"], "--chunks tokens:9999: a chunk holds at most 254 tokens"),
        (["--chunks", "sentences", "--late", "-s", "cls"], "Expected --recipe/--strategy to "
         "be a strategy that pools a late chunk's tokens"),
        (["--dims", "999"], "Expected --dims to be at most the recipe's width 384, but got 999."),
        # Checked as a worker starts too: without this the job died after Ray's retries.
        (["--prompt-name", "query"], "Expected --prompt-name to be one of the model's prompts "
         "(none), but got 'query'."),
    ):  # fmt: skip
        out = tmp_path / "out"
        run = _in_process("embed", str(data), "-o", str(out), "--engine", "ray", "--model",
                       str(minilm_dir), *flags)  # fmt: skip
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
        assert run.stderr.startswith(f"poolkit: error: {message}"), run.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["docs.jsonl"]
