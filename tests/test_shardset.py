"""The work directory of ``--engine ray`` (``poolkit.io.shardset``) without Ray: which input
files a resume skips, and what it deletes and names. The end-to-end runs through the CLI
on a Ray cluster are in ``test_ray_resume.py``."""

from __future__ import annotations

import json
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from poolkit.io.checkpoint import CheckpointError
from poolkit.io.integrity import IntegrityWarning
from poolkit.io.shardset import ShardCheckpoint

SETTINGS = {"engine": "ray", "block_rows": 2}


def _stamp(name: str, first: int, rows: int, sha: str) -> dict:
    return {"name": name, "first_id": first, "rows": rows, "size": 10, "mtime_ns": 1,
            "sha256": sha}  # fmt: skip


def _table(first: int, rows: int) -> pa.Table:
    ids = list(range(first, first + rows))
    return pa.table({"id": pa.array(ids, pa.int64()), "text_id": [f"x:{i}" for i in ids]})


def _job(out, stamps, resume=False):
    """Open, write every stamped file as shards of 2 rows, finish it; keep the directory."""
    cp = ShardCheckpoint.open(out, SETTINGS, resume=resume)
    assert cp.keep(stamps) == [False] * len(stamps)
    for s in stamps:
        shards = [cp.add_shard(_table(a, min(2, s["first_id"] + s["rows"] - a)))
                  for a in range(s["first_id"], s["first_id"] + s["rows"], 2)]  # fmt: skip
        cp.finish(s, shards)
    cp.close()


def _reopen(out, stamps):
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", IntegrityWarning)
        cp = ShardCheckpoint.open(out, SETTINGS, resume=True)
        kept = cp.keep(stamps)
    return cp, kept, [str(w.message) for w in seen]


def test_resume_skips_exactly_the_unchanged_verified_files(tmp_path):
    out = tmp_path / "out"
    stamps = [_stamp("a.txt", 0, 3, "a" * 64), _stamp("b.txt", 3, 4, "b" * 64),
              _stamp("c.txt", 7, 2, "c" * 64), _stamp("d.txt", 9, 2, "d" * 64)]  # fmt: skip
    _job(out, stamps)
    work = tmp_path / "out.poolkit-work"
    records = {json.loads(p.read_text())["name"]: p for p in work.glob("file-*.json")}
    # b.txt: one of its shards damaged; c.txt: its content changed; d.txt's record damaged.
    damaged = work / json.loads(records["b.txt"].read_text())["shards"][1]
    damaged.write_bytes(damaged.read_bytes()[:-5])
    records["d.txt"].write_text(records["d.txt"].read_text().replace('"d.txt"', '"e.txt"'))
    now = [*stamps[:2], _stamp("c.txt", 7, 2, "f" * 64), stamps[3]]
    cp, kept, messages = _reopen(out, now)
    assert kept == [True, False, False, False]
    assert sorted(cp.done_files) == ["a.txt"]
    assert any(records["d.txt"].name in m and "damaged file records" in m for m in messages)
    assert any(damaged.name in m and "damaged shards" in m for m in messages)
    assert any("c.txt" in m and "changed since" in m for m in messages)
    # The orphans: b.txt's intact shard, c.txt's and d.txt's.
    assert any("removed 3 shards" in m and "no finished input file" in m for m in messages), (
        messages
    )
    # Only a.txt's record and shards are left.
    shards = json.loads(records["a.txt"].read_text())["shards"]
    left = sorted(p.name for p in work.iterdir() if p.name.startswith(("part-", "file-")))
    assert left == sorted([records["a.txt"].name, *shards])
    # Staging names the shards in file order; not-done files are refused.
    with pytest.raises(CheckpointError, match=r"Expected every input file done, but .* are not"):
        cp.stage(["a.txt", "b.txt"])
    staged = cp.stage(["a.txt"])
    assert sorted(p.name for p in staged.iterdir()) == ["part-00000.parquet", "part-00001.parquet"]
    assert pq.read_table(staged / "part-00001.parquet")["id"].to_pylist() == [2]
    cp.publish(overwrite=False)
    assert sorted(p.name for p in out.iterdir()) == ["part-00000.parquet", "part-00001.parquet"]
    assert not work.exists()


def test_ids_moved_by_an_earlier_file_send_a_file_back(tmp_path):
    out = tmp_path / "out"
    stamps = [_stamp("a.txt", 0, 3, "a" * 64), _stamp("b.txt", 3, 4, "b" * 64)]
    _job(out, stamps)
    # a.txt grew by a row: b.txt's bytes are the same, but its ids moved.
    now = [_stamp("a.txt", 0, 4, "9" * 64), _stamp("b.txt", 4, 4, "b" * 64)]
    cp, kept, messages = _reopen(out, now)
    assert kept == [False, False]
    assert any("a.txt, b.txt" in m and "changed since" in m for m in messages), messages
    cp.close()


def test_a_file_whose_own_ids_changed_is_sent_back(tmp_path):
    """The ids a file's rows carry (--id-column) are part of what its record vouches for:
    other ids (the same bytes read through another id field) send the file back."""
    out = tmp_path / "out"
    stamps = [{**_stamp("a.jsonl", 0, 3, "a" * 64), "ids": "1" * 64},
              {**_stamp("b.jsonl", 3, 4, "b" * 64), "ids": "2" * 64}]  # fmt: skip
    _job(out, stamps)
    now = [stamps[0], {**stamps[1], "ids": "3" * 64}]
    cp, kept, messages = _reopen(out, now)
    assert kept == [True, False]
    assert any("b.jsonl" in m and "changed since" in m for m in messages), messages
    cp.close()
    # Row numbers (no ids): a record without the key matches a stamp whose ids are None.
    old = tmp_path / "old"
    _job(old, [_stamp("a.txt", 0, 3, "a" * 64)])
    cp, kept, _ = _reopen(old, [{**_stamp("a.txt", 0, 3, "a" * 64), "ids": None}])
    assert kept == [True]
    cp.close()


def test_without_resume_an_existing_work_dir_is_reported_with_its_files(tmp_path):
    out = tmp_path / "out"
    _job(out, [_stamp("a.txt", 0, 3, "a" * 64)])
    with pytest.raises(CheckpointError, match=r"\(1 input file done\)\. Add `resume=True`"):
        ShardCheckpoint.open(out, SETTINGS, resume=False)
    with pytest.raises(CheckpointError, match=r"but they differ \(block_rows: 2 then, 3 now\)"):
        ShardCheckpoint.open(out, {**SETTINGS, "block_rows": 3}, resume=True)
