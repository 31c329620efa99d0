"""The tests' in-process ``poolkit`` (``clitools.run_cli``) behaves as the installed console
script: the same bytes on stdout and stderr and the same exit status for the same command,
and it leaves this process as it found it. The console script runs as its own process:
its exit status and output as a process are what the comparison needs."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import warnings

import clitools
import numpy as np
import pytest

TEXTS = b"John works at Google.\nA man is playing a guitar.\n"


def _untimed(stderr: bytes) -> bytes:
    """The summary line's time and rate are the only bytes that may differ (a fresh process
    spends seconds importing)."""
    return re.sub(rb"in [0-9.]+ s, [0-9.]+ texts/s", b"in T s, R texts/s", stderr)


@pytest.mark.slow
@pytest.mark.parametrize(
    "args",
    [
        ["embed", "in.txt", "-o", "v.OUT.npy"],  # a whole job, with its summary on stderr
        ["embed", "-", "-o", "-", "-s", "cls", "mean"],  # stdin to stdout
        ["embed", "missing.txt", "-o", "v.npy"],  # exit 2, one error line
        ["embed", "in.txt", "-o", "v.npy", "--layers", "lastt"],  # argparse's own exit
        ["tokens", "--text", "John works", "--no-vectors"],  # JSON lines on stdout
        ["tokens", "--help"],
        ["--version"],
        [],  # no command: the help on stderr, exit 2
    ],
    ids=["job", "pipe", "missing", "bad-flag", "tokens", "help", "version", "none"],
)
def test_same_bytes_and_status_as_the_console_script(tmp_path, args):
    (tmp_path / "in.txt").write_bytes(TEXTS)
    inside = clitools.run_cli([a.replace("OUT", "in") for a in args], cwd=tmp_path, stdin=TEXTS)
    script = subprocess.run(
        [*clitools.console_script(), *(a.replace("OUT", "script") for a in args)],
        cwd=tmp_path, input=TEXTS, capture_output=True, timeout=300,
    )  # fmt: skip
    assert (inside.returncode, inside.stdout, _untimed(inside.stderr)) == (
        script.returncode,
        script.stdout,
        _untimed(script.stderr).replace(b"v.script.npy", b"v.in.npy"),
    )
    if args[-1:] == ["v.OUT.npy"]:
        assert inside.returncode == 0, inside.stderr
        np.testing.assert_array_equal(
            np.load(tmp_path / "v.in.npy"), np.load(tmp_path / "v.script.npy")
        )


def test_the_process_is_left_as_it_was(tmp_path):
    """A command that changes directory-relative state, fails, and warns leaves this
    process's directory, environment, umask, streams, signal handlers and warning filters
    as they were."""
    (tmp_path / "in.txt").write_bytes(TEXTS)
    before = (os.getcwd(), dict(os.environ), sys.stdout, sys.stderr, sys.stdin, list(sys.argv),
              signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT),
              list(warnings.filters), warnings.showwarning)  # fmt: skip
    umask = os.umask(0o022)
    os.umask(umask)
    env = {**os.environ, "POOLKIT_CACHE": str(tmp_path / "cache")}
    ok = clitools.run_cli(["embed", "in.txt", "-o", "a.npy"], cwd=tmp_path, env=env, umask=0o077)
    bad = clitools.run_cli(["embed", "in.txt", "-o", "a.npy"], cwd=tmp_path)  # exists: exit 2
    assert (ok.returncode, bad.returncode) == (0, 2), (ok.stderr, bad.stderr)
    assert (tmp_path / "a.npy").stat().st_mode & 0o777 == 0o600  # the command's umask held
    after = (os.getcwd(), dict(os.environ), sys.stdout, sys.stderr, sys.stdin, list(sys.argv),
             signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT),
             list(warnings.filters), warnings.showwarning)  # fmt: skip
    assert after == before
    mask = os.umask(0o022)
    os.umask(mask)
    assert mask == umask


def test_a_warning_and_a_log_line_reach_the_command_stderr(tmp_path, monkeypatch):
    """Python's warning display and a logging handler bound to this process's stderr (as
    transformers binds one) write to the command's stderr, as in a fresh process."""
    import poolkit.cli.inspect_model as inspect_model

    logger = logging.getLogger("poolkit-test-cli-process")
    handler = logging.StreamHandler(sys.stderr)
    logger.addHandler(handler)
    logger.propagate = False
    run = inspect_model.run

    def noisy(args):
        warnings.warn("a user warning", UserWarning, stacklevel=1)
        warnings.warn("deprecated", DeprecationWarning, stacklevel=1)  # ignored, as fresh
        logger.warning("a log line")
        return run(args)

    monkeypatch.setattr(inspect_model, "run", noisy)
    (tmp_path / "in.txt").write_bytes(TEXTS)
    try:
        for _ in range(2):  # shown again: each command is a fresh "process"
            result = clitools.run_cli(["inspect", "--json"], cwd=tmp_path)
            assert result.returncode == 0, result.stderr
            err = result.stderr.decode().splitlines()
            assert err[0].endswith("UserWarning: a user warning"), err
            assert "DeprecationWarning" not in result.stderr.decode()
            assert err[-1] == "a log line", err
    finally:
        logger.removeHandler(handler)
    assert handler.stream is sys.stderr


def test_a_model_changed_on_disk_is_loaded_again(tmp_path, tiny_dirs):
    """Models stay loaded between commands, except where a fresh process would load other
    files: the folder a relative ``--model`` names is replaced between two commands."""
    import shutil

    import poolkit
    from poolkit.encoder import Encoder

    (tmp_path / "in.txt").write_bytes(TEXTS)
    texts = TEXTS.decode().splitlines()
    model = tmp_path / "model"
    for source in ("bert_plain", "gpt2"):
        if model.exists():
            shutil.rmtree(model)
        shutil.copytree(tiny_dirs[source], model)
        args = ["embed", "in.txt", "-o", f"{source}.npy", "--model", "model", "-s", "mean", "-q"]
        result = clitools.run_cli(args, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        want = poolkit.embed(texts, Encoder(model), "mean")
        np.testing.assert_allclose(np.load(tmp_path / f"{source}.npy"), want, atol=1e-6)
