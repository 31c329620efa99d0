"""Running ``poolkit`` in tests: in this process by default (:func:`run_cli`), a real
process where the process is what a test checks (:func:`command`, :func:`with_poolkit_on_path`),
and one error-line check.

:func:`run_cli` calls ``poolkit.cli.main(ARGS)`` as the console script does, with its own
stdin/stdout/stderr (bytes), working directory, environment and umask, and puts back what
a command may change in the process (see :func:`_isolated`). Models stay loaded between
commands (``poolkit.embedding``'s encoder cache): a command costs what its work costs, not
the 7-10 CPU-seconds a fresh interpreter spends importing torch. ``test_cli_process.py``
checks it gives the console script's bytes and exit status.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path

# --- in this process --------------------------------------------------------------------


def run_cli(
    args: Sequence[str],
    *,
    cwd: Path | str,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    umask: int | None = None,
) -> subprocess.CompletedProcess:
    """``poolkit ARGS`` run in this process in ``cwd``: its exit status and the bytes it
    wrote. ``stdin``: what it reads (default: nothing); ``env``: its whole environment, as
    ``subprocess.run(env=...)`` (default: this process's); ``umask``: default this one's.

    Environment variables that libraries read when they are first imported (torch's,
    Hugging Face's, ``PYTHONPATH``) cannot take effect here: a test that needs them runs
    :func:`command` in a real process."""
    args = [os.fspath(a) for a in args]
    out, err = _stream("strict"), _stream("backslashreplace")
    source = io.TextIOWrapper(io.BytesIO(stdin or b""), encoding="utf-8")
    with _isolated(cwd, env, umask, source, out, err):
        code = _main(args, err)
    out.flush()
    err.flush()
    return subprocess.CompletedProcess(
        ["poolkit", *args], code, out.buffer.getvalue(), err.buffer.getvalue()
    )


def poolkit(
    *args: str, cwd: Path | str, stdin: bytes | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``poolkit ARGS`` in ``cwd``, in this process (:func:`run_cli`)."""
    return run_cli(args, cwd=cwd, stdin=stdin, env=env)


def _stream(errors: str) -> io.TextIOWrapper:
    # As a fresh interpreter's stdout/stderr on a pipe: UTF-8, stderr backslash-escaping.
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors=errors, write_through=True)


def _main(args: list[str], err: io.TextIOWrapper) -> int:
    """The status ``sys.exit(main(args))`` ends a process with (a traceback on stderr and 1
    for an exception that escapes, as the interpreter does)."""
    from poolkit.cli import main

    try:
        return main(args)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=err)
        return 1
    except Exception:
        traceback.print_exc(file=err)
        return 1


# What a fresh interpreter's warnings module starts with (no -W, no PYTHONWARNINGS): pytest
# records warnings instead, and a command's stderr must show what a user's would.
_FRESH_FILTERS = (
    ("default", DeprecationWarning, "__main__"),
    ("ignore", DeprecationWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", ResourceWarning, ""),
)


def _executor_worker(thread: threading.Thread) -> bool:
    """A ``concurrent.futures`` pool's worker: at exit the interpreter stops it itself
    (``concurrent.futures.thread._python_exit``), so a fresh process would not wait on it
    (a library's module-level pool, e.g. under OpenVINO's int8 calibration, idles forever)."""
    target = getattr(thread, "_target", None)
    return getattr(target, "__module__", None) == "concurrent.futures.thread"


@contextmanager
def _isolated(cwd, env, umask, stdin, stdout, stderr) -> Iterator[None]:
    """The process state a command sees as a fresh process would, restored afterwards:
    directory, environment, umask, standard streams and ``argv``, warning filters and
    display, logging handlers bound to stderr, SIGINT/SIGTERM handlers, torch's thread
    count. A non-daemon thread the command leaves running is waited for, as at exit."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_mask = os.umask(0o022)
    os.umask(saved_mask if umask is None else umask)
    saved_streams = (sys.stdin, sys.stdout, sys.stderr, sys.argv)
    saved_signals = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    before = set(threading.enumerate())
    handlers = _stderr_handlers(sys.stderr)
    try:
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        os.chdir(cwd)
        _drop_stale_encoders()
        sys.stdin, sys.stdout, sys.stderr = stdin, stdout, stderr
        sys.argv = ["poolkit"]
        for handler in handlers:
            handler.setStream(stderr)
        with warnings.catch_warnings():
            warnings.resetwarnings()
            for action, category, module in reversed(_FRESH_FILTERS):
                warnings.filterwarnings(action, category=category, module=module)
            warnings.showwarning = _show_on_stderr
            yield
            for thread in set(threading.enumerate()) - before:
                if not thread.daemon and not _executor_worker(thread):
                    thread.join()
            _stamp_encoders()
    finally:
        for handler in handlers:
            handler.setStream(saved_streams[2])
        sys.stdin, sys.stdout, sys.stderr, sys.argv = saved_streams
        for sig, handler in saved_signals.items():
            signal.signal(sig, handler)
        if torch is not None and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        os.chdir(saved_cwd)
        os.umask(saved_mask)
        if dict(os.environ) != saved_env:
            os.environ.clear()
            os.environ.update(saved_env)


# --- the models kept loaded between commands ----------------------------------------------
#
# ``poolkit.encoder_cache.get_encoder`` keeps the two most recent models loaded, keyed by the
# model argument and the encoder settings. Between commands that is what a fresh process
# would load too, unless what the model comes from differs: the environment (the ONNX cache,
# POOLKIT_CACHE, HF_HOME, ...), the folder a relative model path names from the command's
# directory, or the files of that folder (a test rewrites or damages them). A model loaded
# under other conditions is dropped, and the command loads it again as a fresh process would.

_loaded: dict[tuple, tuple] = {}  # cache key -> the conditions its model was loaded under


def _conditions(key: tuple) -> tuple:
    """The environment (less pytest's note of the running test), and the model folder's
    path and its files' stat, for a cache key."""
    model = key[0]
    files: list[tuple] = []
    folder = os.path.abspath(model) if model is not None else None
    if folder is not None and os.path.isdir(folder):
        for root, _, names in os.walk(folder):
            for name in sorted(names):
                info = os.stat(os.path.join(root, name))
                files.append((root, name, info.st_size, info.st_mtime_ns, info.st_ino))
    env = tuple(sorted(kv for kv in os.environ.items() if kv[0] != "PYTEST_CURRENT_TEST"))
    return env, folder, tuple(files)


def _drop_stale_encoders() -> None:
    cache = sys.modules.get("poolkit.encoder_cache")
    if cache is None:
        return
    for key in list(cache._CACHE):
        if _loaded.get(key) != _conditions(key):
            del cache._CACHE[key]


def _stamp_encoders() -> None:
    cache = sys.modules.get("poolkit.encoder_cache")
    if cache is None:
        return
    _loaded.clear()
    for key in cache._CACHE:
        _loaded[key] = _conditions(key)


def _show_on_stderr(message, category, filename, lineno, file=None, line=None) -> None:
    """Python's own display of a warning, on the command's stderr."""
    text = warnings.formatwarning(message, category, filename, lineno, line)
    (file or sys.stderr).write(text)


def _stderr_handlers(stderr) -> list[logging.StreamHandler]:
    """Logging handlers writing to this process's stderr (transformers binds one when it is
    imported): a command's log lines go to its own stderr."""
    targets = {id(stderr), id(sys.__stderr__)}
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    found = []
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if isinstance(handler, logging.StreamHandler) and id(handler.stream) in targets:
                found.append(handler)
    return found


# --- real processes -------------------------------------------------------------------------


def command(*args: str) -> list[str]:
    """The argv that runs ``poolkit ARGS`` as its own process (this interpreter, this
    ``PYTHONPATH``): for tests of the process itself (signals, kills, exit statuses)."""
    return [sys.executable, "-m", "poolkit.cli", *args]


@cache
def bin_dir() -> Path:
    """A folder whose ``poolkit`` runs as ``command()`` does: put it first on ``PATH`` for a
    shell command line."""
    folder = Path(tempfile.mkdtemp(prefix="poolkit-bin-"))
    script = folder / "poolkit"
    line = " ".join(f"'{part}'" for part in command())
    script.write_text(f'#!/bin/sh\nexec {line} "$@"\n', encoding="utf-8")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def with_poolkit_on_path(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with ``bin_dir()`` first on ``PATH``."""
    env = dict(os.environ if env is None else env)
    env["PATH"] = f"{bin_dir()}{os.pathsep}{env.get('PATH', '')}"
    return env


def console_script() -> list[str]:
    """The installed ``poolkit`` script beside this interpreter (``python -m poolkit.cli``
    where none is installed)."""
    found = shutil.which("poolkit", path=str(Path(sys.executable).parent))
    return [found] if found else command()


def one_error_line(result: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    """Check the run failed with ``code`` and one ``poolkit: error:`` line holding every
    fragment (no traceback); returns the line."""
    err = result.stderr.decode()
    assert result.returncode == code, err
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("poolkit: error: ")
    for fragment in fragments:
        assert fragment in err, err
    return err
