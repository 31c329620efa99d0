"""`poolkit` commands in tests, each a real process forked from a warm one.

A fresh ``python -m poolkit.cli`` spends 7-10 CPU-seconds importing torch and transformers
before it reads its first argument (8-12 s wall for a 2-text ``embed`` on the 2-core EPYC,
against about 1 s forked warm); the slow set starts a few hundred of them. Here one *warm*
process per pytest worker imports those once and forks a child per command:

    client  (``python -IS warmcli.py ARGS``: the stdlib only, ~20 ms to start)
      │  argv, cwd, environment and its own stdin/stdout/stderr (passed as descriptors)
      ▼
    warm process ──fork──▶ handler ──fork──▶ command: ``poolkit.cli.main(ARGS)`` on those
                                             descriptors, in that folder and environment

The command is still its own process: it reads and writes the client's descriptors, its
exit status (or the signal that ended it) becomes the client's, a SIGTERM/SIGINT/SIGHUP the
client receives is passed on to it, and when the client dies (a test's timeout kills it)
the handler kills the command. What is not the same as a fresh interpreter, and so runs
fresh instead:

- an environment that differs from the warm process's in a variable its imports may read
  (``_IMPORT_TIME``: a test that blocks imports through ``PYTHONPATH``, or sets torch's or
  Hugging Face's variables) gets a fresh interpreter, which the client ``exec``\\s in its
  own place;
- a warm process that could not start clean (an import wrote to stderr or started a
  thread: a fork would copy that state), or ``POOLKIT_TEST_FRESH_CLI=1``.

How the command is started (the ``poolkit`` script, ``python -m poolkit.cli``, what a
fresh start imports) is tested by ``test_startup.py`` and the tests that start it fresh.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys

FRESH = [sys.executable, "-m", "poolkit.cli"]
SOCKET_VARIABLE = "POOLKIT_TEST_WARM_SOCKET"
# Variables the warm process's imports (torch, transformers, NumPy, SciPy, scikit-learn, the
# interpreter) may read when they load: a command whose environment differs from the warm
# process's in one of these starts fresh. Others are read when used, so the command's own
# value holds (POOLKIT_CACHE; RAY_*, read when the command imports Ray). PYTHONDONTWRITEBYTECODE
# is applied to the command as Python would at start-up.
_IMPORT_TIME = ("PYTHON", "LD_", "OMP_", "KMP_", "MKL_", "OPENBLAS", "GOTO", "TORCH", "PYTORCH",
                "CUDA", "NVIDIA", "HF_", "HUGGINGFACE", "TRANSFORMERS", "TOKENIZERS", "SAFETENSORS",
                "NUMPY", "NPY_", "SCIPY", "SKLEARN", "XDG_", "HOME", "LANG", "LC_", "TZ")  # fmt: skip
# Limits a test sets on the process it starts (``preexec_fn``), carried over to the command.
_LIMITS = ("RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_AS")
# What the slow set's commands import; a command loading another family's code imports it.
_WARM_IMPORTS = (
    "numpy",
    "torch",
    "transformers",
    "transformers.models.bert.modeling_bert",
    "transformers.models.auto.tokenization_auto",
    "transformers.models.auto.modeling_auto",
    "tokenizers",
    "safetensors.torch",
    "scipy.stats",
    "sklearn.linear_model",
    "poolkit",
    "poolkit.cli",
    "poolkit.cli.embed",
    "poolkit.cli.compare",
    "poolkit.cli.export",
)


# --- the test side ------------------------------------------------------------------------

_server: dict = {}  # the warm process of this pytest process, once started


def command() -> list[str]:
    """The argv prefix that runs ``poolkit``: the warm client when the warm process is up
    (started on first use), else a fresh ``python -m poolkit.cli``."""
    if os.environ.get("POOLKIT_TEST_FRESH_CLI") == "1":
        return list(FRESH)
    if "proc" not in _server:
        _server["proc"] = _start()
    if _server["proc"] is None:
        return list(FRESH)
    return [sys.executable, "-IS", os.path.abspath(__file__)]


def _start():
    import atexit
    import subprocess
    import tempfile

    folder = tempfile.mkdtemp(prefix="poolkit-warm-")
    path = os.path.join(folder, "socket")
    os.environ[SOCKET_VARIABLE] = path  # before the start: both sides see one environment
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--serve", path],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    ready = proc.stdout.readline().decode().strip()
    if ready != "ready":
        proc.kill()
        _, err = proc.communicate()
        why = ready or err.decode().strip()
        print(f"warmcli: fresh interpreters for the CLI ({why})", file=sys.stderr)
        os.environ.pop(SOCKET_VARIABLE)
        return None
    atexit.register(_stop, proc)
    return proc


def _stop(proc) -> None:
    proc.kill()
    proc.wait()
    for stream in (proc.stdout, proc.stderr):
        stream.close()


# --- the warm process -----------------------------------------------------------------------


def _serve(path: str) -> None:
    import importlib
    import tempfile

    parent = os.getppid()
    before = dict(os.environ)
    with tempfile.TemporaryFile() as err:
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            for name in _WARM_IMPORTS:
                importlib.import_module(name)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        said = err.read().decode(errors="replace").strip()
    # Native thread pools that handle fork themselves may run (OpenBLAS shuts its pool down
    # before a fork and starts it again after); a Python thread, or jemalloc's (pyarrow: not
    # imported here), would be copied mid-state.
    import threading

    if said or threading.active_count() != 1:
        print(f"unclean: {threading.enumerate()}; stderr: {said[:500]!r}", flush=True)
        return
    # Imports set variables (torch: KMP_INIT_AT_FORK, ...), as they do in a fresh process: a
    # request is compared with the environment before them, and a command gets them on top.
    imported = {k: v for k, v in os.environ.items() if before.get(k) != v}
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    listener.settimeout(2.0)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    print("ready", flush=True)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    while os.getppid() == parent:  # the pytest process went away: so does this one
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                _handle(conn, before, imported)
            finally:
                os._exit(0)
        conn.close()


def _handle(conn: socket.socket, before: dict, imported: dict) -> None:
    """One command: read the request, fork the command, report how it ended."""
    request, fds = _receive(conn)
    env = request["env"]
    differ = {k for k in set(env) | set(before) if env.get(k) != before.get(k)}
    differ -= {k for k in imported if env.get(k) == imported[k]}  # the client imported them too
    differ.discard("PYTHONDONTWRITEBYTECODE")
    if any(k.startswith(_IMPORT_TIME) for k in differ):
        conn.sendall(b"fresh\n")
        return
    pid = os.fork()
    if pid == 0:
        try:
            conn.close()
            _run(request, {**env, **imported}, fds)
        finally:  # only reached when setting up the command failed: say so, exit 70
            import traceback

            traceback.print_exc()
            os._exit(70)
    for fd in fds:
        os.close(fd)
    conn.sendall(f"pid {pid}\n".encode())
    pidfd = os.pidfd_open(pid)
    while True:
        ready, _, _ = select.select([conn, pidfd], [], [])
        if pidfd in ready:
            break
        if not conn.recv(64):  # the client is gone (killed at a timeout): so is its command
            os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        conn.sendall(f"signal {os.WTERMSIG(status)}\n".encode())
    else:
        conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())


def _run(request: dict, env: dict, fds: list[int]) -> None:
    """In the command's process: become ``poolkit ARGS`` and exit as it would."""
    import atexit
    import io
    import resource
    import threading
    import traceback

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(env)
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    os.umask(request["umask"])
    for name, limits in request["limits"].items():
        resource.setrlimit(getattr(resource, name), tuple(limits))
    # SIGINT as Python sets it up: ignored when the client inherited it ignored (a shell's
    # background job), else KeyboardInterrupt.
    ignored = request["sigint_ignored"]
    signal.signal(signal.SIGINT, signal.SIG_IGN if ignored else signal.default_int_handler)
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        old = getattr(sys, name)
        raw = open(fd, "rb" if fd == 0 else "wb", closefd=False)
        tty = name == "stdout" and os.isatty(fd)
        new = io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors,
                               line_buffering=name == "stderr" or tty)  # fmt: skip
        setattr(sys, name, new)
        setattr(sys, f"__{name}__", new)
    sys.argv = [request["argv0"], *request["args"]]
    code = 0
    try:
        from poolkit.cli import main

        code = main(request["args"])
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # as the interpreter's exit: wait for non-daemon threads
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:
        code = code or 120
    os._exit(code)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    (size,) = struct.unpack("!I", data[:4])
    data = data[4:]
    while len(data) < size:
        more = conn.recv(size - len(data))
        if not more:
            raise EOFError("the client went away mid-request")
        data += more
    return json.loads(data), list(fds)


# --- the client -------------------------------------------------------------------------------


def _client(args: list[str]) -> None:
    # A signal that comes before the command has a pid is passed on once it has one.
    pending: list[int] = []
    target: list[int] = []
    sigint_ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN

    def forward(signum, _frame):
        if not target:
            pending.append(signum)
            return
        try:
            os.kill(target[0], signum)
        except ProcessLookupError:  # it ended meanwhile: its status is on the way
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, forward)
    path = os.environ.get(SOCKET_VARIABLE)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path or "")
    except OSError:
        _exec_fresh(args, pending)
    import resource

    umask = os.umask(0)
    os.umask(umask)
    request = {
        "args": args, "argv0": sys.argv[0], "cwd": os.getcwd(), "env": dict(os.environ),
        "umask": umask, "sigint_ignored": sigint_ignored,
        "limits": {name: resource.getrlimit(getattr(resource, name)) for name in _LIMITS},
    }  # fmt: skip
    payload = json.dumps(request).encode()
    socket.send_fds(conn, [struct.pack("!I", len(payload)) + payload], [0, 1, 2])
    reader = conn.makefile("rb")
    first = reader.readline().decode().split()
    if first == ["fresh"]:
        conn.close()
        _exec_fresh(args, pending)
    if not first:
        sys.exit("warmcli: the warm process closed the connection")
    target.append(int(first[1]))
    for signum in pending:
        forward(signum, None)
    end = reader.readline().decode().split()
    if not end:
        sys.exit("warmcli: the handler went away before the command ended")
    how, value = end[0], int(end[1])
    if how == "signal":
        signal.signal(value, signal.SIG_DFL)
        os.kill(os.getpid(), value)
    sys.exit(value)


def _exec_fresh(args: list[str], pending: list[int]) -> None:
    for signum in pending:  # what a fresh process would have done with it: end
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    os.execv(FRESH[0], [*FRESH, *args])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve(sys.argv[2])
    else:
        _client(sys.argv[1:])
