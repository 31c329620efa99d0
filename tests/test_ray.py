"""Ray Data integration: same ids and vectors as one machine, through the library and the
CLI, with a worker process killed mid-job; and one clear line when Ray is missing.

One local Ray (2 CPUs, small object store) serves the module; the CLI joins it with
``--address``. The reference is ``poolkit.embed`` on one machine over texts read here with
plain Python (not poolkit's readers).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from testdata import sentiment_lines, sts_sentences

from poolkit.ray import Embedder

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
TOL = 1e-6  # observed max |difference| across batch compositions: <= 2.8e-7


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


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024**2,
             logging_level="WARNING")  # fmt: skip
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


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


def test_library_matches_one_machine(ray_cluster, corpus, reference, minilm_dir):
    from poolkit.ray import Corpus, embed_dataset

    folder, texts = corpus
    scanned = Corpus.scan(folder)
    assert [f.name for f in scanned.files] == ["a.txt", "b.jsonl", "c.parquet"]
    assert scanned.counts == [120, 115, 115]
    ds = embed_dataset(scanned.dataset(block_rows=40), minilm_dir, workers=2, batch_size=40,
                       keep_text=True)  # fmt: skip
    table = _collect(ray_cluster, ds)
    ids, vectors, text_ids = _rows(table)
    np.testing.assert_array_equal(ids, np.arange(len(texts)))
    assert text_ids == _expected_text_ids()
    order = np.argsort(table["id"].to_numpy())
    assert [table["text"][int(i)].as_py() for i in order] == texts
    assert table.schema.field("mean").type.list_size == 384
    assert np.abs(vectors - reference).max() < TOL


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


def test_killed_worker_loses_and_duplicates_nothing(
    ray_cluster, corpus, reference, minilm_dir, tmp_path
):
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
    ds = embed_dataset(Corpus.scan(folder).dataset(block_rows=25), minilm_dir, workers=2,
                       batch_size=25, fn=_VictimEmbedder, marker=str(marker))  # fmt: skip
    table = _collect(ray_cluster, ds)
    thread.join(timeout=5)
    assert killed, "no actor reached its second batch"
    with pytest.raises(ProcessLookupError):
        os.kill(killed[0], 0)
    ids, vectors, text_ids = _rows(table)
    assert table.num_rows == len(texts)  # nothing duplicated
    np.testing.assert_array_equal(ids, np.arange(len(texts)))  # nothing lost
    assert text_ids == _expected_text_ids()
    assert np.abs(vectors - reference).max() < TOL


def _poolkit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "poolkit.cli", *args], capture_output=True,
                          text=True, cwd=REPO, timeout=300)  # fmt: skip


def test_cli_matches_local_cli(ray_cluster, corpus, tmp_path):
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    folder, texts = corpus
    # The one-machine run reads the same texts as one file, written here independently.
    single = tmp_path / "all.jsonl"
    single.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    local = _poolkit("embed", str(single), "-o", str(tmp_path / "local.parquet"), "--quiet")
    assert local.returncode == 0, local.stderr
    address = ray_cluster.get_runtime_context().gcs_address
    out = tmp_path / "out"
    run = _poolkit("embed", f"{folder}/*", "-o", str(out), "--engine", "ray",
                   "--address", address, "--workers", "2", "--chunk-size", "64")  # fmt: skip
    assert run.returncode == 0, run.stderr
    summary = run.stderr.strip().splitlines()[-1]
    assert summary.startswith("poolkit: 350 texts -> ")
    assert "texts/s" in summary and summary.endswith(", 2 workers x 1 CPU (Ray)")
    shards = sorted(out.glob("*.parquet"))
    assert len(shards) > 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no temp left
    got = pads.dataset(out, format="parquet").to_table()
    assert set(got.column_names) == {"id", "text_id", "mean"}
    want = pq.read_table(tmp_path / "local.parquet")
    ids, vectors, text_ids = _rows(got)
    np.testing.assert_array_equal(ids, want["id"].to_numpy())
    assert text_ids == _expected_text_ids()
    assert np.abs(vectors - np.stack(want["mean"].to_numpy(zero_copy_only=False))).max() < TOL
    again = _poolkit("embed", str(folder), "-o", str(out), "--engine", "ray",
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
    result = _poolkit("embed", str(src), "-o", str(tmp_path / "out"), *argv)
    assert result.returncode == 2
    assert result.stderr.strip() == f"poolkit: error: {message}"


def test_cli_input_errors(tmp_path):
    out = tmp_path / "out"
    missing = _poolkit("embed", str(tmp_path / "nope"), "-o", str(out), "--engine", "ray")
    assert (missing.returncode, missing.stderr.strip()) == (
        2, f"poolkit: error: {tmp_path / 'nope'}: no such file or folder."
    )  # fmt: skip
    stdin = _poolkit("embed", "-", "-o", str(out), "--engine", "ray")
    assert stdin.returncode == 2
    assert "cannot read stdin" in stdin.stderr
    (tmp_path / "file.parquet").write_bytes(b"")
    src = tmp_path / "in.txt"
    src.write_text("hello\n", encoding="utf-8")
    to_file = _poolkit("embed", str(src), "-o", str(tmp_path / "file.parquet"), "--engine", "ray")
    assert to_file.returncode == 2
    assert "writes a folder of Parquet shards, but this is a file" in to_file.stderr
    assert not out.exists()


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
        [sys.executable, "-m", "poolkit.cli", "embed", str(src), "-o", str(tmp_path / "out"),
         "--engine", "ray"],
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
    result = _poolkit("embed", str(src), "-o", str(tmp_path / "out"), "--engine", "ray",
                      "--address", "ray://head:10001")  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "poolkit: error: --address ray://head:10001: ray:// addresses need Ray Client: "
        "pip install 'ray[client]' (or run on the cluster with --address auto)."
    )
