"""The tests' warm `poolkit` (``warmcli``) behaves as a fresh ``python -m poolkit.cli``: the
same bytes on stdout and stderr, the same exit status, signals and deaths passed on, and a
fresh interpreter where the environment asks for one."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import clitools
import numpy as np
import pytest
import warmcli

TEXTS = b"John works at Google.\nA man is playing a guitar.\n"


def _both(args: list[str], cwd: Path, **run):
    """(warm, fresh) results of ``poolkit ARGS`` (``run``: more ``subprocess.run``
    arguments); an ``OUT`` in an argument becomes ``warm`` or ``fresh``."""
    results = []
    for prefix, tag in ((warmcli.command(), "warm"), (warmcli.FRESH, "fresh")):
        argv = [*prefix, *(a.replace("OUT", tag) for a in args)]
        results.append(subprocess.run(argv, cwd=cwd, capture_output=True, timeout=300, **run))
    return results


def _untimed(stderr: bytes) -> bytes:
    """The summary line's time and rate are the only bytes that may differ (a fresh start
    spends seconds importing)."""
    return re.sub(rb"in [0-9.]+ s, [0-9.]+ texts/s", b"in T s, R texts/s", stderr)


def test_the_warm_process_starts_clean():
    # An import that starts a Python thread or writes to stderr would make every test start
    # fresh interpreters again (slowly, but silently): fail here instead.
    if os.environ.get("POOLKIT_TEST_FRESH_CLI") == "1":
        pytest.skip("POOLKIT_TEST_FRESH_CLI=1 asks for fresh interpreters")
    assert warmcli.command() != warmcli.FRESH


@pytest.mark.parametrize(
    "args",
    [
        ["embed", "in.txt", "-o", "v.OUT.npy"],  # a whole job, with its summary on stderr
        ["embed", "-", "-o", "-", "-s", "cls", "mean"],  # stdin to stdout
        ["embed", "missing.txt", "-o", "v.npy"],  # exit 2, one error line
        ["embed", "in.txt", "-o", "v.npy", "--layers", "lastt"],  # argparse's own exit
        ["tokens", "--help"],
        ["--version"],
    ],
    ids=["job", "pipe", "missing", "bad-flag", "help", "version"],
)
def test_same_bytes_and_status_as_a_fresh_interpreter(tmp_path, args):
    (tmp_path / "in.txt").write_bytes(TEXTS)
    warm, fresh = _both(args, tmp_path, input=TEXTS)
    assert (warm.returncode, warm.stdout, _untimed(warm.stderr)) == (
        fresh.returncode,
        fresh.stdout,
        _untimed(fresh.stderr).replace(b"v.fresh.npy", b"v.warm.npy"),
    )
    if args[-1] == "v.OUT.npy":
        assert warm.returncode == 0, warm.stderr
        np.testing.assert_array_equal(
            np.load(tmp_path / "v.warm.npy"), np.load(tmp_path / "v.fresh.npy")
        )


def _sleeper(tmp_path: Path) -> subprocess.Popen:
    """A warm command that waits on its stdin (an open pipe): ``embed -`` reading."""
    return subprocess.Popen(
        clitools.command("embed", "-", "-o", "out.npy"), cwd=tmp_path,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip


def _command_pids(client: int) -> set[int]:
    """Processes whose stdin is the client's (the command got the client's descriptors)."""
    mine = os.readlink(f"/proc/{client}/fd/0")
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != client:
            try:
                if os.readlink(f"/proc/{entry}/fd/0") == mine:
                    found.add(int(entry))
            except OSError:
                continue
    return found


def _wait_for_command(client: subprocess.Popen) -> int:
    """The warm command's pid. It fails when the client ``exec``\\ed a fresh interpreter
    instead: this test process's environment then differs from the warm process's in a
    variable its imports read, and every command of this worker starts fresh (slowly)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pids = _command_pids(client.pid)
        if pids:
            (pid,) = pids
            return pid
        cmdline = Path(f"/proc/{client.pid}/cmdline").read_bytes().split(b"\0")
        assert b"poolkit.cli" not in cmdline, "the client started a fresh interpreter"
        time.sleep(0.05)
    raise AssertionError("the command never started")


def test_sigterm_reaches_the_command_and_its_status_comes_back(tmp_path):
    client = _sleeper(tmp_path)
    _wait_for_command(client)
    time.sleep(0.5)  # past main()'s signal set-up
    client.send_signal(signal.SIGTERM)
    _, err = client.communicate(timeout=60)
    assert client.returncode == 143, err
    assert err.decode().strip() == "poolkit: terminated (SIGTERM)"


def test_a_killed_client_takes_its_command_with_it(tmp_path):
    client = _sleeper(tmp_path)
    command = _wait_for_command(client)
    client.kill()
    client.wait(timeout=60)
    assert client.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{command}") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not os.path.exists(f"/proc/{command}"), "the command outlived its client"


def test_an_environment_read_at_start_up_gets_a_fresh_interpreter(tmp_path):
    # A `sitecustomize` on PYTHONPATH runs only in an interpreter that starts: the warm
    # process cannot honour PYTHONPATH, so the client must exec a fresh one.
    (tmp_path / "site").mkdir()
    marker = tmp_path / "started"
    (tmp_path / "site" / "sitecustomize.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n", encoding="utf-8"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    run = subprocess.run(clitools.command("--version"), env=env, capture_output=True, timeout=120)
    assert run.returncode == 0 and run.stdout.startswith(b"poolkit ")
    assert marker.exists()
    marker.unlink()
    env = {**os.environ, "POOLKIT_CACHE": str(tmp_path / "cache")}  # read at run time
    run = subprocess.run(clitools.command("--version"), env=env, capture_output=True, timeout=120)
    assert run.returncode == 0 and not marker.exists()


def test_limits_set_on_the_client_bind_the_command(tmp_path):
    # RLIMIT_FSIZE set in the client (as a test's preexec_fn does) holds in the command:
    # its output write fails with the disk-full kind of error, exit 1... as fresh.
    import resource

    (tmp_path / "in.txt").write_bytes(TEXTS * 200)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, resource.RLIM_INFINITY))

    warm, fresh = _both(["embed", "in.txt", "-o", "OUT.npy"], tmp_path, preexec_fn=limit)
    assert warm.returncode == fresh.returncode != 0, (warm.stderr, fresh.stderr)
    assert warm.stderr == fresh.stderr.replace(b"fresh.npy", b"warm.npy")
