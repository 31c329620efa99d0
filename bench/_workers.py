"""Persistent benchmark workers: one long-lived process per method, driven over a pipe.

A worker loads its model once (exports, caches and compiles happen there, outside any timed
region), then answers one JSON line per command on stdin with one JSON line on its own
protocol channel (the original stdout; the libraries' own prints are sent to stderr, which
goes to a log file). Commands:

- ``{"op": "texts", "name": N, "path": P}``: read a JSON list of strings from ``P`` as set ``N``.
- ``{"op": "embed", "name": N, "limit": K, "out": P|null}``: embed the first ``K`` texts of set
  ``N`` (all when ``K`` is null); answer ``{"seconds": s}``, the wall time of the embedding
  call alone; with ``out`` the ``(K, D)`` float32 result is saved there afterwards (``.npy``).
- ``{"op": "quit"}``.

Any exception answers ``{"error": "..."}``. Only the standard library and NumPy are imported
here, so the same code runs in poolkit's environment and in the peer's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

EmbedFn = Callable[[list[str]], np.ndarray]


def serve(build: Callable[[], tuple[EmbedFn, dict[str, Any]]]) -> None:
    """Worker side: build the method, say ``ready`` (with ``info``), then answer commands."""
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)  # C-level and Python prints of the libraries go to the log, not the protocol
    sys.stdout = sys.stderr

    def say(obj: dict[str, Any]) -> None:
        proto.write(json.dumps(obj) + "\n")

    start = time.perf_counter()
    try:
        fn, info = build()
    except Exception as exc:  # reported to the driver, which skips the method
        traceback.print_exc()
        say({"error": f"{type(exc).__name__}: {exc}"})
        return
    say({"ready": True, "load_seconds": time.perf_counter() - start, "info": info})
    sets: dict[str, list[str]] = {}
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["op"] == "quit":
                return
            if cmd["op"] == "texts":
                sets[cmd["name"]] = json.loads(Path(cmd["path"]).read_text(encoding="utf-8"))
                say({"ok": True})
            elif cmd["op"] == "embed":
                texts = sets[cmd["name"]][: cmd.get("limit")]
                start = time.perf_counter()
                emb = fn(texts)
                seconds = time.perf_counter() - start
                if cmd.get("out"):
                    np.save(cmd["out"], np.asarray(emb, dtype=np.float32))
                say({"seconds": seconds})
            else:
                say({"error": f"unknown op {cmd['op']!r}"})
        except Exception as exc:
            traceback.print_exc()
            say({"error": f"{type(exc).__name__}: {exc}"})


class WorkerError(RuntimeError):
    """A worker failed to start or to answer; the message ends with its log's tail."""


class Worker:
    """Driver side of one worker process (see the module docstring)."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str]) -> None:
        self.name, self.log = name, log
        self._log_fh = log.open("w", encoding="utf-8")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log_fh,
            text=True, encoding="utf-8", env=env, bufsize=1,
        )  # fmt: skip
        self.info: dict[str, Any] = {}
        self.load_seconds = float("nan")

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise WorkerError(f"{self.name}: worker exited {self.proc.returncode}{self._tail()}")
        reply = json.loads(line)
        if "error" in reply:
            raise WorkerError(f"{self.name}: {reply['error']}{self._tail()}")
        return reply

    def _tail(self) -> str:
        self._log_fh.flush()
        lines = self.log.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        return "" if not lines else "\n    log: " + "\n    log: ".join(lines[-8:])

    def wait_ready(self) -> None:
        reply = self._reply()
        self.info, self.load_seconds = reply["info"], reply["load_seconds"]

    def request(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(cmd) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass  # the reply read below reports the exit and the log
        return self._reply()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._log_fh.close()
