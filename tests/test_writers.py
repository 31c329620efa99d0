"""The streaming writers: .npy files byte-identical to numpy.save; nothing left behind."""

from __future__ import annotations

import io

import numpy as np
import pytest

from poolkit.io.writers import open_writer


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (5, 384), (2049, 7)])
def test_npy_equals_numpy_save_byte_for_byte(tmp_path, shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape).astype(np.float32)
    path = tmp_path / "x.npy"
    with open_writer(path, ["mean"]) as w:
        for lo in range(0, max(shape[0], 1), 1000):  # several chunks
            w.write(np.arange(lo, min(lo + 1000, shape[0])), {"mean": a[lo : lo + 1000]})
    ref = io.BytesIO()
    np.save(ref, a)
    assert path.read_bytes() == ref.getvalue()
    assert [p.name for p in tmp_path.iterdir()] == ["x.npy"]


def test_failed_write_leaves_nothing(tmp_path):
    path = tmp_path / "x.jsonl"
    with pytest.raises(ValueError, match="of shape"), open_writer(path, ["mean"]) as w:
        w.write(np.arange(2), {"mean": np.zeros((3, 4), np.float32)})
    assert list(tmp_path.iterdir()) == []
