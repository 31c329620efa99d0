"""The space a full-disk message asks for: the estimate against files really written."""

from __future__ import annotations

import errno

import numpy as np
import pytest

from poolkit.io.diskfull import disk_full, estimate_output_bytes, is_disk_full, size_text
from poolkit.io.writers import open_writer


@pytest.mark.parametrize(("ext", "names", "tolerance"),
                         [("npy", ["mean"], 0.0), ("parquet", ["mean", "cls"], 0.15),
                          ("jsonl", ["mean", "cls"], 0.15)])  # fmt: skip
def test_estimate_is_close_to_the_real_file(tmp_path, ext, names, tolerance):
    rng = np.random.default_rng(0)
    vecs = rng.standard_normal((300, 384)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)  # unit vectors, as most models give
    path = tmp_path / f"out.{ext}"
    with open_writer(path, names) as out:
        for start in range(0, 300, 100):
            out.write(np.arange(start, start + 100), {n: vecs[start : start + 100] for n in names})
    real = path.stat().st_size
    estimate = estimate_output_bytes(ext, 300, [384] * len(names))
    assert abs(estimate - real) <= tolerance * real, (estimate, real)


def test_message_names_the_file_the_need_and_the_fix():
    e = disk_full(OSError(errno.ENOSPC, "No space left on device"), "/data/out.npy", 1_536_128)
    assert str(e) == (
        "/data/out.npy: cannot write it (no space left on the device); it needs 1.5 MB. "
        "Free some space."
    )
    big = disk_full(OSError(errno.EFBIG, "File too large"), "x.png", 4096, at_least=True)
    assert "it needs at least 4.1 kB" in str(big) and "raise the file size limit" in str(big)
    assert is_disk_full(e) and e.errno == errno.ENOSPC
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert [size_text(n) for n in (999, 1000, 2_500_000)] == ["999 bytes", "1.0 kB", "2.5 MB"]
