"""OpenVINO static int8: agreement with fp32 by SmoothQuant alpha and calibration set.

    python bench/bench_calibration.py [--alphas 0.95 0.8 0.7 0.6 0.5] [--calibration mix]

For each alpha, quantizes all-MiniLM-L6-v2's ONNX export (poolkit's cached one) through
``poolkit.backends.openvino``'s own calibration, on the calibration items poolkit's Encoder
makes, with only SmoothQuant's alpha changed, then embeds held-out texts and reports
the cosine of each text's vector to the fp32 ONNX vector (min, 1st percentile, mean).

Calibration (``--calibration``): ``mix`` = bench_speed's 300 STS-B *train* texts (150
sentences, 150 joins of 12 sentences), what the benchmarks use; ``short`` = 300 train
sentences. Held out (never calibrated on, never evaluated elsewhere): 2000 STS-B train
sentences (4000-5999) and 300 joins of 12 train sentences (from 6000), ~200 tokens each.
NNCF's default alpha for transformer matmuls is 0.95; poolkit uses
``poolkit.backends.openvino.SMOOTH_QUANT_ALPHA``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data
import bench_speed


def held_out() -> tuple[list[str], list[str]]:
    sents = [s for row in _data.stsb("train") for s in (row[1], row[2])]
    longs = [" ".join(sents[6000 + 12 * k : 6000 + 12 * (k + 1)]) for k in range(300)]
    return sents[4000:6000], longs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.95, 0.8, 0.7, 0.6, 0.5])
    parser.add_argument("--calibration", choices=["mix", "short"], default="mix")
    args = parser.parse_args()

    import warnings

    import openvino as ov

    from poolkit import embed
    from poolkit.backends import onnx as _onnx
    from poolkit.backends.openvino import SMOOTH_QUANT_ALPHA, OpenVinoRunner
    from poolkit.backends.openvino import _calibrate as calibrate
    from poolkit.encoder import Encoder

    path = bench_speed.model_dir()
    fp32 = Encoder(path, backend="onnx")
    if args.calibration == "mix":
        texts = bench_speed.calibration_texts()
    else:
        texts = [s for row in _data.stsb("train") for s in (row[1], row[2])][:300]
    source = _onnx.load_onnx_runner(_onnx.transformer_dir(path), quantize=None).path
    short, long = held_out()
    # 78 of the long texts pass 256 tokens: fp32 and int8 truncate them alike, said once here.
    warnings.filterwarnings("ignore", message=".*were longer than.*truncated")
    print("long held-out texts over 256 tokens are truncated, for fp32 and int8 alike")
    ref_short, ref_long = embed(short, fp32), embed(long, fp32)
    # poolkit's own int8 Encoder (cached after the first run); each alpha swaps its runner.
    int8 = Encoder(path, backend="openvino", quantize="int8-static", calibrate=texts)
    settings = int8.backend.runner.settings
    items = int8._calibration(texts)  # what the Encoder gave NNCF for its own build
    print(f"calibration: {args.calibration} ({len(texts)} texts); poolkit's alpha: "
          f"{SMOOTH_QUANT_ALPHA}; cosine to fp32, min / 1st percentile / mean")  # fmt: skip
    print(f"{'alpha':>6}  {'2000 short held-out':>26}  {'300 long held-out':>26}")
    with tempfile.TemporaryDirectory() as tmp:
        for alpha in args.alphas:
            model = calibrate(ov.convert_model(str(source)), items, alpha=alpha)
            xml = Path(tmp) / f"alpha-{alpha}.xml"
            ov.save_model(model, str(xml), compress_to_fp16=False)
            int8.backend.runner = OpenVinoRunner(xml, settings=settings)
            row = []
            for texts_, ref in ((short, ref_short), (long, ref_long)):
                cos = (embed(texts_, int8) * ref).sum(axis=1)
                row.append(f"{cos.min():.4f} / {np.percentile(cos, 1):.4f} / {cos.mean():.4f}")
            print(f"{alpha:>6}  {row[0]:>26}  {row[1]:>26}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
