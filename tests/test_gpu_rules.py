"""`embed` on a GPU: the rules that decide dtype, attention and batch size, checked on the CPU.

The CUDA-only decisions are pure functions of what the device reports (its type, whether it
has bfloat16, its free memory), so the CPU runs them with made-up devices; the tests that
need a real GPU are marked and skip without one.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch

from poolkit.backends.pytorch import TorchBackend, default_dtype, resolve_dtype, stored_dtype

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


# --- dtype: float32 on the CPU, the checkpoint's own type on CUDA ----------------------


@pytest.mark.parametrize(
    ("device", "stored", "bf16", "want"),
    [
        ("cpu", None, False, "float32"),
        ("cpu", "float16", True, "float32"),  # the CPU never changes: float32
        ("cpu", "bfloat16", True, "float32"),
        ("mps", "float16", False, "float32"),
        ("cuda", None, True, "float32"),  # a checkpoint that says nothing: float32
        ("cuda", "float32", True, "float32"),  # as SentenceTransformer(model) loads it
        ("cuda", "float16", True, "float16"),
        ("cuda", "float16", False, "float16"),
        ("cuda", "bfloat16", True, "bfloat16"),
        ("cuda", "bfloat16", False, "float32"),  # no bf16 on this GPU: never float16 for it
    ],
)
def test_default_dtype_rule(device, stored, bf16, want):
    assert default_dtype(device, stored, bf16) == want


def test_stored_dtype_reads_either_spelling(tmp_path):
    for key, value, want in [("dtype", "bfloat16", "bfloat16"), ("torch_dtype", "float16",
                             "float16"), ("torch_dtype", "torch.float32", "float32"),
                             ("dtype", "int8", None)]:  # fmt: skip
        (tmp_path / "config.json").write_text(json.dumps({key: value}), encoding="utf-8")
        assert stored_dtype(tmp_path) == want
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    assert stored_dtype(tmp_path) is None
    assert stored_dtype(tmp_path / "missing") is None


def test_resolve_dtype_on_the_cpu_is_float32_whatever_the_checkpoint(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"dtype": "float16"}), encoding="utf-8")
    assert resolve_dtype(None, "cpu", tmp_path) is torch.float32
    assert resolve_dtype("bfloat16", "cpu", tmp_path) is torch.bfloat16  # asked for: honoured
    assert resolve_dtype("float16", "cuda", tmp_path) is torch.float16


@cuda
def test_cuda_default_dtype_follows_the_checkpoint(minilm_dir):
    from poolkit.encoder import Encoder

    enc = Encoder(minilm_dir, device="cuda")  # MiniLM is stored in float32
    assert enc.backend.dtype is torch.float32
    assert Encoder(minilm_dir, device="cuda", dtype="float16").backend.dtype is torch.float16


# --- attention: scaled-dot-product where transformers has it ----------------------------


def test_torch_backend_uses_sdpa(minilm):
    assert minilm.backend.attention == "sdpa"


def test_sdpa_and_eager_give_the_same_vectors(minilm_dir, sts_dev):
    from poolkit import embed
    from poolkit.encoder import Encoder

    sdpa = Encoder(minilm_dir, device="cpu")
    eager = Encoder(minilm_dir, device="cpu")
    eager.backend = TorchBackend(minilm_dir, device="cpu", dtype=torch.float32, attention="eager")
    assert eager.backend.attention == "eager"
    texts = sts_dev[:40]
    a = embed(texts, sdpa, ["mean", "cls", "max"])
    b = embed(texts, eager, ["mean", "cls", "max"])
    for name in a:
        np.testing.assert_allclose(a[name], b[name], atol=2e-6, rtol=0)


@pytest.mark.filterwarnings("ignore:.*were truncated")
@pytest.mark.parametrize("name", ["modernbert", "t5", "qwen3"])
def test_sdpa_and_eager_agree_on_other_families(name, tmp_path):
    from tiny_models import FAMILY_CORPUS, build_family

    from poolkit import embed
    from poolkit.encoder import Encoder

    logging.disable(logging.WARNING)
    try:
        path = build_family(name, tmp_path / name)
    finally:
        logging.disable(logging.NOTSET)
    fast = Encoder(path, device="cpu")
    eager = Encoder(path, device="cpu")
    eager.backend = TorchBackend(path, device="cpu", dtype=torch.float32, attention="eager")
    texts = list(FAMILY_CORPUS[:6])
    assert fast.backend.attention in ("sdpa", "eager")  # eager where the family has no SDPA
    np.testing.assert_allclose(embed(texts, fast), embed(texts, eager), atol=1e-5, rtol=0)


# --- batch budget: sized to the device's free memory on CUDA ---------------------------

GIB = 1 << 30
MINILM = {"hidden": 384, "layers": 6, "heads": 12, "intermediate": 1536, "max_length": 256}
BERT_LARGE = {"hidden": 1024, "layers": 24, "heads": 16, "intermediate": 4096, "max_length": 512}


def test_device_batch_tokens_rule():
    from poolkit.encoder import CUDA_BATCH_TOKENS, device_batch_tokens

    low, high = CUDA_BATCH_TOKENS
    # An H200 (139 GiB free) and MiniLM in float16: far more than a batch needs, the cap.
    assert device_batch_tokens(139 * GIB, dtype_bytes=2, **MINILM) == high
    # A 16 GiB card with 14.5 GiB free and BERT-large in float16: 92,160 bytes a token.
    assert device_batch_tokens(int(14.5 * GIB), dtype_bytes=2, **BERT_LARGE) == 65536
    # The same in float32 needs twice the bytes a token: half the budget.
    assert device_batch_tokens(int(14.5 * GIB), dtype_bytes=4, **BERT_LARGE) == 32768
    # Little free memory: the floor (a batch still holds one whole row).
    assert device_batch_tokens(64 << 20, dtype_bytes=2, **BERT_LARGE) == low
    budgets = [device_batch_tokens(g * GIB, dtype_bytes=2, **BERT_LARGE) for g in range(1, 80)]
    assert budgets == sorted(budgets)  # more memory, never a smaller batch
    assert all(b & (b - 1) == 0 and low <= b <= high for b in budgets)  # powers of two


def test_default_budget_on_a_cuda_backend_reads_free_memory(monkeypatch):
    from types import SimpleNamespace

    from poolkit.encoder import ACCELERATOR_BATCH_TOKENS, _default_batch_tokens

    config = SimpleNamespace(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                             intermediate_size=4096)  # fmt: skip
    fake = SimpleNamespace(
        device="cuda:0", dtype=torch.float16, model=SimpleNamespace(config=config)
    )
    asked = []

    def mem_get_info(device):
        asked.append(device)
        return int(14.5 * GIB), 16 * GIB

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    assert _default_batch_tokens(fake, 512) == 65536
    assert asked == [torch.device("cuda:0")]
    # Not CUDA, or no model config to size from: the fixed accelerator default.
    assert _default_batch_tokens(SimpleNamespace(device="mps"), 512) == ACCELERATOR_BATCH_TOKENS
    assert _default_batch_tokens(SimpleNamespace(device="cuda"), 512) == ACCELERATOR_BATCH_TOKENS


def test_cpu_budget_is_unchanged(minilm):
    from poolkit.encoder import CPU_BATCH_TOKENS

    assert minilm.max_batch_tokens == CPU_BATCH_TOKENS == 2048


@cuda
def test_cuda_budget_follows_the_rule(minilm_dir):
    from poolkit.encoder import CUDA_BATCH_TOKENS, Encoder

    enc = Encoder(minilm_dir, device="cuda", dtype="float16")
    low, high = CUDA_BATCH_TOKENS
    assert low <= enc.max_batch_tokens <= high
    assert Encoder(minilm_dir, device="cuda", max_batch_tokens=4096).max_batch_tokens == 4096


# --- prefetch: the next batch laid out while this one runs ------------------------------


def test_prefetched_keeps_order_and_prepares_one_ahead():
    import threading

    from poolkit.encoder import prefetched

    started: list[int] = []
    threads: set[str] = set()

    def prepare(x: int) -> int:
        started.append(x)
        threads.add(threading.current_thread().name)
        return x * x

    seen = []
    for x, y in prefetched(list(range(6)), prepare, enabled=True):
        # When item x is handed over, x + 1 at most has been started: one slot.
        assert max(started) <= x + 1
        seen.append((x, y))
    assert seen == [(x, x * x) for x in range(6)]
    assert threads and all(t.startswith("poolkit-prefetch") for t in threads)
    assert list(prefetched([1, 2], prepare, enabled=False)) == [(1, 1), (2, 4)]
    assert list(prefetched([], prepare)) == []


def test_prefetched_raises_at_the_failing_item_and_stops_cleanly():
    from poolkit.encoder import prefetched

    def prepare(x: int) -> int:
        if x == 3:
            raise ValueError("bad item 3")
        return x

    got = []
    with pytest.raises(ValueError, match="bad item 3"):
        for x, _ in prefetched(list(range(6)), prepare):
            got.append(x)
    assert got == [0, 1, 2]  # every item before the failing one, in order
    gen = prefetched(list(range(6)), lambda x: x)
    assert next(gen) == (0, 0)
    gen.close()  # leaving early: the worker is shut down, nothing leaks


def test_prefetch_changes_no_batch(minilm, sts_dev):
    texts = sts_dev[:120]
    before = minilm.prefetch
    assert before is False  # off on the CPU, where it measured no gain
    try:
        runs = {}
        for flag in (False, True):
            minilm.prefetch = flag
            runs[flag] = list(minilm.iter_batches(texts, max_batch_tokens=256))
    finally:
        minilm.prefetch = before
    assert len(runs[False]) == len(runs[True]) > 3
    for a, b in zip(runs[False], runs[True], strict=True):
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.input_ids, b.input_ids)
        np.testing.assert_array_equal(a.offsets, b.offsets)
        assert torch.equal(a.hidden, b.hidden)


# --- pooling and the output stage on the device, one copy to the host per batch ----------


@pytest.fixture(scope="module")
def dense_dir(tmp_path_factory):
    from tiny_models import build_family

    logging.disable(logging.WARNING)
    try:  # a pipeline with a Dense module and Normalize after pooling
        return build_family("bert_dense", tmp_path_factory.mktemp("dense") / "bert_dense")
    finally:
        logging.disable(logging.NOTSET)


def test_device_output_stage_matches_the_host_and_copies_once(dense_dir, monkeypatch):
    """The accelerator branch of sequence_vectors, run on CPU tensors: same vectors as the
    NumPy branch, and one host copy per batch for all recipes."""
    from tiny_models import FAMILY_CORPUS

    import poolkit.driver as driver
    from poolkit import embed
    from poolkit.encoder import Encoder

    enc = Encoder(dense_dir, device="cpu", max_length=64)
    texts = list(FAMILY_CORPUS) * 3
    asks = [{}, {"strategy": ["mean", "cls+max"], "pipeline": "pooled", "normalize": True},
            {"recipe": ["mean@first_last/raw", "max"], "pipeline": "pooled"}]  # fmt: skip
    host = [embed(texts, enc, max_batch_tokens=64, **kw) for kw in asks]
    copies = []
    real = driver._one_copy_to_host

    def counted(vectors):
        copies.append(len(vectors))
        return real(vectors)

    monkeypatch.setattr(driver, "on_accelerator", lambda x: hasattr(x, "detach"))
    monkeypatch.setattr(driver, "_one_copy_to_host", counted)
    for kw, want in zip(asks, host, strict=True):
        copies.clear()
        got = embed(texts, enc, max_batch_tokens=64, **kw)
        batches = len(list(enc.iter_batches(texts, max_batch_tokens=64)))
        assert len(copies) == batches > 1  # one copy a batch, every recipe in it
        assert copies[0] == (len(want) if isinstance(want, dict) else 1)
        for a, b in zip(want.values() if isinstance(want, dict) else [want],
                        got.values() if isinstance(got, dict) else [got], strict=True):  # fmt: skip
            assert a.dtype == b.dtype == np.float32
            np.testing.assert_allclose(a, b, atol=2e-6, rtol=0)


def test_on_accelerator():
    from poolkit.driver import on_accelerator

    assert not on_accelerator(torch.zeros(2))
    assert not on_accelerator(np.zeros(2))
    assert on_accelerator(torch.zeros(2, device="meta"))


@cuda
def test_cuda_embed_matches_the_cpu(minilm_dir, sts_dev):
    from poolkit import embed
    from poolkit.encoder import Encoder

    texts = sts_dev[:200]
    cpu = embed(texts, minilm_dir, ["mean", "cls"], device="cpu")
    gpu = embed(texts, Encoder(minilm_dir, device="cuda"), ["mean", "cls"])
    half = embed(texts, Encoder(minilm_dir, device="cuda", dtype="float16"), ["mean", "cls"])
    for name in cpu:
        np.testing.assert_allclose(gpu[name], cpu[name], atol=1e-4, rtol=0)
        cos = (half[name] * cpu[name]).sum(1)  # unit vectors
        assert cos.min() > 1 - 1e-3


# --- --engine ray --gpus-per-worker: placed on GPUs, or refused in one line ---------------


def test_ray_worker_placement_rule():
    from poolkit.cli._ray_engine import default_workers

    assert default_workers({"CPU": 16}, 2, None) == 8
    assert default_workers({"CPU": 16, "GPU": 2}, 2, 1) == 2  # one worker a GPU
    assert default_workers({"CPU": 16, "GPU": 2}, 2, 0.5) == 4  # two workers share a GPU
    assert default_workers({"CPU": 4, "GPU": 8}, 2, 1) == 2  # CPUs bound it too
    assert default_workers({"CPU": 1}, 2, None) == 1


def test_ray_cluster_gpu_check():
    from argparse import Namespace

    from poolkit.cli._ray_engine import cluster_gpus
    from poolkit.errors import InputError

    assert cluster_gpus(Namespace(gpus_per_worker=None), {"CPU": 4}) == ""
    assert cluster_gpus(Namespace(gpus_per_worker=1.0), {"GPU": 2}) == " + 1 GPU"
    with pytest.raises(InputError, match=r"^--gpus-per-worker 1: the Ray cluster has no GPU"):
        cluster_gpus(Namespace(gpus_per_worker=1.0), {"CPU": 4})
    with pytest.raises(InputError, match="has 2 GPUs in all; ask for at most 2"):
        cluster_gpus(Namespace(gpus_per_worker=3.0), {"GPU": 2})


@pytest.fixture
def lines(tmp_path):
    path = tmp_path / "texts.txt"
    path.write_text("one text\nanother text\n", encoding="utf-8")
    return path


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal needs a machine without GPU")
def test_gpus_per_worker_is_refused_without_a_visible_gpu(lines, tmp_path):
    pytest.importorskip("ray.data")
    from clitools import one_error_line, poolkit

    out = tmp_path / "out"
    run = poolkit("embed", str(lines), "-o", str(out), "--engine", "ray", "--gpus-per-worker",
                  "1", cwd=tmp_path)  # fmt: skip
    one_error_line(run, 2, "--gpus-per-worker 1: this machine has no CUDA GPU visible to "
                   "PyTorch; drop --gpus-per-worker to run the workers on CPUs")  # fmt: skip
    assert not out.exists()


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--gpus-per-worker", "1"], "--gpus-per-worker works with --engine ray only"),
        (["--engine", "ray", "--gpus-per-worker", "0"],
         "Expected --gpus-per-worker to be a positive number of GPUs"),
        (["--engine", "ray", "--gpus-per-worker", "1", "--backend", "onnx"],
         "--backend onnx runs on the CPU; drop --gpus-per-worker"),
        (["--engine", "ray", "--gpus-per-worker", "1", "--device", "cpu"],
         "pass --device auto or cuda"),
    ],
)  # fmt: skip
def test_gpus_per_worker_flag_refusals(lines, tmp_path, flags, fragment):
    if "ray" in flags:
        pytest.importorskip("ray.data")
    from clitools import one_error_line, poolkit

    run = poolkit("embed", str(lines), "-o", str(tmp_path / "out"), *flags, cwd=tmp_path)
    one_error_line(run, 2, fragment)
