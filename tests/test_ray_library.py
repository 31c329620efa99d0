"""The library call of docs/scaling.md finishes on a cluster its actors would fill.

``embed_dataset(ray.data.read_parquet(...), workers=W, cpus_per_worker=C)`` with ``W x C``
equal to the cluster's CPUs used to wait for ever: the read tasks (1 CPU each) waited
for CPUs the actors held. The call runs here as documented, in a child process with its
own 2-CPU Ray, under a timeout; its vectors are checked against sentence-transformers.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.slow

_SUBJECTS = ["The cat", "A child", "My neighbour", "The old train", "Every river"]
_ACTIONS = ["sleeps in the sun", "reads a long book", "runs to the station", "sings at night"]
_ENDINGS = ["today.", "again and again.", "without a word.", "before the rain comes."]

# docs/scaling.md's "Library" example with a local folder, 2 workers x 1 CPU on 2 CPUs.
_DOCUMENTED = """
import sys
import ray
from poolkit.ray import embed_dataset

ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024**2,
         logging_level="ERROR")
ray.data.DataContext.get_current().enable_progress_bars = False
docs, vectors = sys.argv[1], sys.argv[2]

ds = ray.data.read_parquet(docs)            # any Dataset with a text column
ds = embed_dataset(ds, "sentence-transformers/all-MiniLM-L6-v2", ["mean", "cls"],
                   text_column="body", workers=2, cpus_per_worker=1)
ds.write_parquet(vectors)
"""


def _texts() -> list[str]:
    return [f"{s} {a} {e}" for s in _SUBJECTS for a in _ACTIONS for e in _ENDINGS][:48]


def test_documented_call_finishes_when_the_pool_fills_the_cluster(tmp_path, minilm_st):
    pytest.importorskip("ray")
    import pyarrow as pa
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq

    texts = _texts()
    docs = tmp_path / "docs"
    docs.mkdir()
    for k in range(3):  # three files: three read tasks
        rows = range(16 * k, 16 * (k + 1))
        pq.write_table(pa.table({"id": list(rows), "body": [texts[i] for i in rows]}),
                       docs / f"part-{k}.parquet")  # fmt: skip
    out = tmp_path / "vectors"
    try:
        run = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(_DOCUMENTED), str(docs), str(out)],
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("embed_dataset did not finish in 240 s: the actor pool starved the reads")
    assert run.returncode == 0, run.stderr[-3000:]
    table = pads.dataset(out, format="parquet").to_table()
    order = np.argsort(table["id"].to_numpy())
    np.testing.assert_array_equal(table["id"].to_numpy()[order], np.arange(len(texts)))
    assert [table["body"][int(i)].as_py() for i in order] == texts
    mean = np.stack(table["mean"].to_numpy(zero_copy_only=False))[order]
    want = minilm_st.encode(texts, convert_to_numpy=True)  # the model's own pooling: mean
    np.testing.assert_allclose(mean, want, atol=1e-5)
    assert table.schema.field("cls").type.list_size == 384


def test_pool_sizes():
    pytest.importorskip("ray")
    from poolkit.ray import require_ray
    from poolkit.ray._embedder import _pool

    ray = require_ray()  # ray, with ray.data imported

    fixed = _pool(ray, 2, 1, 4, 1)  # 2 x 1 CPU leaves 2 of 4 free
    assert (fixed.min_size, fixed.max_size) == (2, 2)
    growing = _pool(ray, 2, 1, 2, 1)  # the documented call on 2 CPUs
    assert (growing.min_size, growing.max_size) == (1, 2)
    cli = _pool(ray, 2, 1, 2, 0)  # zero-CPU reads and writes (the CLI)
    assert (cli.min_size, cli.max_size) == (2, 2)
    with pytest.raises(ValueError) as e:
        _pool(ray, 1, 2, 2, 1)
    assert str(e.value) == (
        "Expected `cpus_per_worker` to be at most 1 (the cluster's 2 CPUs less `spare_cpus`=1), "
        "but got 2: the dataset's other stages (reading, writing) could never run. Ask for "
        "fewer CPUs per worker, or pass spare_cpus=0 if every other stage asks for 0 CPUs."
    )
