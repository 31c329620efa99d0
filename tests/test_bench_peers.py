"""bench/bench_peers.py without the peer venv: its CLI, and the worker protocol it times through.

The protocol test runs a real worker process (bench/_workers.py) whose method is a NumPy
function, so the figures it answers can be checked exactly.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench"
sys.path.insert(0, str(BENCH))
import _workers  # noqa: E402

pytestmark = pytest.mark.slow  # spawns processes


def run_bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / "bench_peers.py"), *args],
                          capture_output=True, text=True, timeout=120)  # fmt: skip


def test_help_names_the_peer_flags():
    result = run_bench("--help")
    assert result.returncode == 0, result.stderr
    for flag in ("--peer-python", "--cache", "--limit-short", "--limit-long", "--repeats"):
        assert flag in result.stdout


def test_peer_methods_without_peer_python_are_refused_in_one_line():
    result = run_bench("--methods", "st-onnx")
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert "--peer-python" in last and "bench/peer-venv.sh" in last, result.stderr


def test_bad_repeats_is_refused():
    result = run_bench("--methods", "pk-torch", "--repeats", "0")
    assert result.returncode == 2
    assert "--repeats must be a positive integer, got 0" in result.stderr


WORKER = textwrap.dedent(
    """
    import sys
    import time
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import _workers

    def lengths(texts):
        time.sleep(0.1 * len(texts))  # a known cost: the answered seconds must include it
        return np.array([[len(t), 1.0] for t in texts])

    def build():
        if sys.argv[2] == "fail":
            raise RuntimeError("no such backend here")
        print("library chatter on stdout")  # must not reach the protocol
        time.sleep(0.3)  # a known load time
        return lengths, {"kind": "lengths"}

    _workers.serve(build)
    """
)


def start(tmp_path: Path, mode: str) -> _workers.Worker:
    script = tmp_path / "worker.py"
    script.write_text(WORKER, encoding="utf-8")
    argv = [sys.executable, str(script), str(BENCH), mode]
    return _workers.Worker(mode, argv, tmp_path / f"{mode}.log", env={})


def test_worker_answers_times_and_outputs(tmp_path):
    texts = ["a", "bb", "ccc", "dddd"]
    (tmp_path / "t.json").write_text(json.dumps(texts), encoding="utf-8")
    began = time.perf_counter()
    w = start(tmp_path, "ok")
    try:
        w.wait_ready()
        # The worker times the build (0.3 s of sleep), within the wall time seen here.
        assert w.info == {"kind": "lengths"}
        assert 0.3 <= w.load_seconds <= time.perf_counter() - began
        w.request(op="texts", name="s", path=str(tmp_path / "t.json"))
        asked = time.perf_counter()
        reply = w.request(op="embed", name="s", limit=3, out=str(tmp_path / "o.npy"))
        # Three texts at 0.1 s each, within the wall time of the request seen here.
        assert 0.3 <= reply["seconds"] <= time.perf_counter() - asked
        out = np.load(tmp_path / "o.npy")
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, [[1, 1], [2, 1], [3, 1]])
        with pytest.raises(_workers.WorkerError, match="KeyError"):
            w.request(op="embed", name="missing", limit=None, out=None)
        w.request(op="embed", name="s", limit=None, out=str(tmp_path / "all.npy"))
        assert np.load(tmp_path / "all.npy").shape == (4, 2)
    finally:
        w.close()
    assert "library chatter on stdout" in (tmp_path / "ok.log").read_text(encoding="utf-8")


def test_worker_that_cannot_build_reports_why(tmp_path):
    w = start(tmp_path, "fail")
    try:
        with pytest.raises(_workers.WorkerError, match="RuntimeError: no such backend here"):
            w.wait_ready()
    finally:
        w.close()
