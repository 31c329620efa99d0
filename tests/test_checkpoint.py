"""The checkpoint store on real files: atomic parts, resume, fingerprints, publication."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from poolkit.io.checkpoint import (
    Checkpoint,
    CheckpointError,
    model_fingerprint,
    texts_digest,
    work_dir_for,
)
from poolkit.io.diskfull import DiskFullError
from poolkit.io.integrity import IntegrityWarning
from poolkit.io.writers import open_writer

SETTINGS = {"model_files": {"config.json": "ab", "model.safetensors": "cd"},
            "strategies": ["mean"], "normalize": True, "max_length": 256,
            "chunk_size": 4096}  # fmt: skip
TEXTS = [[f"text {i}" for i in range(k * 5, k * 5 + 5)] for k in range(4)]


def part_arrays(k: int, names: list[str], dim: int = 6) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(k)
    return {n: rng.standard_normal((len(TEXTS[k]), dim + j)).astype(np.float32)
            for j, n in enumerate(names)}  # fmt: skip


def direct(path, names: list[str]) -> None:
    """The uninterrupted path: every part straight through the writer."""
    with open_writer(path, names) as out:
        for k in range(len(TEXTS)):
            out.write(np.arange(k * 5, k * 5 + 5), part_arrays(k, names))


def commit(cp: Checkpoint, k: int, names: list[str]) -> None:
    cp.commit(k, k * 5, texts_digest(TEXTS[k]), part_arrays(k, names))


@pytest.mark.parametrize(
    ("ext", "names"), [("npy", ["mean"]), ("parquet", ["mean", "cls"]), ("jsonl", ["mean", "cls"])]
)
def test_interrupted_and_resumed_equals_uninterrupted_byte_for_byte(tmp_path, ext, names):
    settings = {**SETTINGS, "strategies": names}
    out = tmp_path / f"out.{ext}"
    cp = Checkpoint.open(out, settings, resume=False)
    commit(cp, 0, names)
    commit(cp, 1, names)
    cp.close()  # the process dies here: lock released, directory kept
    assert not out.exists() and work_dir_for(out).is_dir()

    cp = Checkpoint.open(out, settings, resume=True)
    assert cp.done == {0, 1}
    for k in range(len(TEXTS)):
        if k in cp.done:
            cp.verify(k, k * 5, texts_digest(TEXTS[k]))
        else:
            commit(cp, k, names)
    cp.publish(len(TEXTS), overwrite=False)

    direct(tmp_path / f"ref.{ext}", names)
    assert out.read_bytes() == (tmp_path / f"ref.{ext}").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"out.{ext}", f"ref.{ext}"]
    # And the values are the parts', independently of the writer.
    expected = {n: np.concatenate([part_arrays(k, names)[n] for k in range(4)]) for n in names}
    if ext == "npy":
        np.testing.assert_array_equal(np.load(out), expected["mean"])
    elif ext == "parquet":
        table = pq.read_table(out)
        assert table["id"].to_pylist() == list(range(20))
        for n in names:
            np.testing.assert_array_equal(np.array(table[n].to_pylist(), np.float32), expected[n])
    else:
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert [r["id"] for r in rows] == list(range(20))
        np.testing.assert_array_equal(
            np.array([r["cls"] for r in rows], np.float32), expected["cls"]
        )


def test_existing_work_dir_without_resume_is_reported_and_kept(tmp_path):
    out = tmp_path / "out.npy"
    cp = Checkpoint.open(out, SETTINGS, resume=False)
    commit(cp, 0, ["mean"])
    cp.close()
    before = sorted(os.listdir(work_dir_for(out)))
    with pytest.raises(
        CheckpointError,
        match=r"out.npy.poolkit-work: Expected no work directory of an earlier run, .*1 part done.*`resume=True`",
    ):
        Checkpoint.open(out, SETTINGS, resume=False)
    assert sorted(os.listdir(work_dir_for(out))) == before


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        ({"strategies": ["cls"]}, 'strategies: ["mean"] then, ["cls"] now'),
        ({"normalize": False}, "normalize: true then, false now"),
        ({"max_length": 128}, "max_length: 256 then, 128 now"),
        # --part-size, stored under its old key (older work directories resume), shown as such
        ({"chunk_size": 2}, "part_size: 4096 then, 2 now"),
        (
            {"model_files": {"config.json": "ab", "model.safetensors": "XX"}},
            "model_files: model.safetensors differ",
        ),
    ],
)
def test_changed_settings_are_refused_on_resume(tmp_path, change, fragment):
    out = tmp_path / "out.npy"
    Checkpoint.open(out, SETTINGS, resume=False).close()
    with pytest.raises(
        CheckpointError, match="Expected the settings the checkpoint was made with, but they differ"
    ) as info:
        Checkpoint.open(out, {**SETTINGS, **change}, resume=True)
    assert fragment in str(info.value) and "delete the directory" in str(info.value)
    Checkpoint.open(out, SETTINGS, resume=True).close()  # still usable with the old settings


def test_changed_texts_in_done_part_are_refused(tmp_path):
    out = tmp_path / "out.npy"
    cp = Checkpoint.open(out, SETTINGS, resume=False)
    commit(cp, 0, ["mean"])
    cp.close()
    cp = Checkpoint.open(out, SETTINGS, resume=True)
    cp.verify(0, 0, texts_digest(TEXTS[0]))
    with pytest.raises(
        CheckpointError, match=r"Expected the input of the part already embedded, but texts 0\.\.4"
    ):
        cp.verify(0, 0, texts_digest([*TEXTS[0][:4], "edited"]))
    with pytest.raises(CheckpointError, match="Expected the input of the part already embedded"):
        cp.verify(0, 1, texts_digest(TEXTS[0]))
    cp.close()


def test_digest_counts_text_boundaries():
    assert texts_digest(["ab", "c"]) != texts_digest(["a", "bc"])
    assert texts_digest(["", ""]) != texts_digest([""])
    # A lone surrogate (from a JSON escape) is hashed, not refused, and not confused with
    # another one; checked against the documented format written out independently.
    assert texts_digest(["\ud800 x"]) != texts_digest(["\udfff x"])
    for texts in (["\ud800 lone surrogate"], ["ab", "c"], [], ["", "é"]):
        assert texts_digest(texts) == _reference_digest(texts), texts


def _reference_digest(texts: list[str]) -> str:
    """SHA-256 over each text's 8-byte little-endian UTF-8 length, then its bytes."""
    import hashlib

    h = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def test_a_second_process_is_locked_out(tmp_path):
    out = tmp_path / "out.npy"
    first = Checkpoint.open(out, SETTINGS, resume=False)
    with pytest.raises(CheckpointError, match="Expected no other poolkit process on this output"):
        Checkpoint.open(out, SETTINGS, resume=True)
    first.close()
    Checkpoint.open(out, SETTINGS, resume=True).close()


def test_leftover_temporary_files_are_not_chunks(tmp_path):
    out = tmp_path / "out.npy"
    cp = Checkpoint.open(out, SETTINGS, resume=False)
    commit(cp, 0, ["mean"])
    cp.close()
    torn = work_dir_for(out) / ".chunk-00000001.npz.k2j3.tmp"
    torn.write_bytes(b"PK\x03\x04 half a zip")  # what a kill during a commit leaves
    cp = Checkpoint.open(out, SETTINGS, resume=True)
    assert cp.done == {0} and not torn.exists()
    cp.close()


def test_failed_commit_leaves_no_chunk(tmp_path, monkeypatch):
    out = tmp_path / "out.npy"
    cp = Checkpoint.open(out, SETTINGS, resume=False)

    def no_space(*_a, **_k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(DiskFullError, match=r"chunk-00000000-.*no space left.*it needs 1\.\d kB"):
        commit(cp, 0, ["mean"])
    monkeypatch.undo()
    assert cp.done == set() and os.listdir(work_dir_for(out)) == ["lock", "manifest.json"]
    cp.close()


@pytest.mark.parametrize("ext", ["npy", "parquet", "jsonl"])
def test_parts_committed_in_order_are_never_read_back(tmp_path, monkeypatch, ext):
    names = ["mean"] if ext == "npy" else ["mean", "cls"]
    settings = {**SETTINGS, "strategies": names}
    reads: list[str] = []
    original = Checkpoint._read
    monkeypatch.setattr(Checkpoint, "_read", lambda cp, k: reads.append(k) or original(cp, k))
    out = tmp_path / f"out.{ext}"
    cp = Checkpoint.open(out, settings, resume=False)
    for k in range(len(TEXTS)):
        commit(cp, k, names)
    # The output grows in the work directory as parts are committed, from memory.
    assert [p.name.startswith(f".assembled.{ext}.") for p in work_dir_for(out).glob(".*")] == [True]
    cp.publish(len(TEXTS), overwrite=False)
    assert reads == []
    direct(tmp_path / f"ref.{ext}", names)
    assert out.read_bytes() == (tmp_path / f"ref.{ext}").read_bytes()

    # Resumed: the two parts found done are read back once each, when part 2 is committed.
    out = tmp_path / f"resumed.{ext}"
    cp = Checkpoint.open(out, settings, resume=False)
    commit(cp, 0, names)
    commit(cp, 1, names)
    cp.close()  # killed: the output under assembly goes, the parts stay
    assert not list(work_dir_for(out).glob(".*.tmp"))
    cp = Checkpoint.open(out, settings, resume=True)
    for k in (0, 1):
        cp.verify(k, k * 5, texts_digest(TEXTS[k]))
    assert reads == []
    commit(cp, 2, names)
    assert reads == [0, 1]
    commit(cp, 3, names)
    cp.publish(len(TEXTS), overwrite=False)
    assert reads == [0, 1]
    assert out.read_bytes() == (tmp_path / f"ref.{ext}").read_bytes()


def test_no_room_for_the_output_midway_gives_it_up_until_publish(tmp_path, monkeypatch):
    from poolkit.io.writers import EmbeddingWriter

    out = tmp_path / "out.npy"
    cp = Checkpoint.open(out, SETTINGS, resume=False)
    commit(cp, 0, ["mean"])
    write = EmbeddingWriter.write

    def full(self, *a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(EmbeddingWriter, "write", full)
    commit(cp, 1, ["mean"])  # the part is committed; the assembly is dropped, not the job
    assert cp.done == {0, 1} and not list(work_dir_for(out).glob(".*.tmp"))
    monkeypatch.setattr(EmbeddingWriter, "write", write)
    commit(cp, 2, ["mean"])  # not assembled again midway: that waits for publish
    assert not list(work_dir_for(out).glob(".*.tmp"))
    commit(cp, 3, ["mean"])
    monkeypatch.setattr(EmbeddingWriter, "write", full)
    with pytest.raises(DiskFullError, match=r"out\.npy: cannot write it .*it needs 608 bytes"):
        cp.publish(len(TEXTS), overwrite=False)  # 128 + 20 x 6 x 4: what OUTPUT needs
    assert cp.done == {0, 1, 2, 3} and not out.exists()
    assert not list(work_dir_for(out).glob(".*.tmp")) and not list(work_dir_for(out).glob("assem*"))
    monkeypatch.setattr(EmbeddingWriter, "write", write)
    cp.publish(len(TEXTS), overwrite=False)  # space freed: every part read back
    direct(tmp_path / "ref.npy", ["mean"])
    assert out.read_bytes() == (tmp_path / "ref.npy").read_bytes()


def test_a_failed_assembly_or_publish_never_leaves_a_wrong_output(tmp_path, monkeypatch):
    from poolkit.io.writers import EmbeddingWriter, sidecar_path

    names = ["mean", "cls"]
    settings = {**SETTINGS, "strategies": names}
    direct(tmp_path / "ref.jsonl", names)
    write = EmbeddingWriter.write

    def half_then_eio(self, ids, arrays, columns=None):  # half a part written, then EIO
        self._file.write(b'{"id": 5, "mean": [')
        raise OSError(5, "Input/output error")

    # 1. Any error while a part is appended drops the assembly (never half a part in it).
    out = tmp_path / "a.jsonl"
    cp = Checkpoint.open(out, settings, resume=False)
    commit(cp, 0, names)
    monkeypatch.setattr(EmbeddingWriter, "write", half_then_eio)
    with pytest.raises(OSError, match="Input/output error"):
        commit(cp, 1, names)  # committed, not assembled
    monkeypatch.setattr(EmbeddingWriter, "write", write)
    assert cp.done == {0, 1} and not list(work_dir_for(out).glob(".*.tmp"))
    commit(cp, 2, names)
    commit(cp, 3, names)
    cp.publish(len(TEXTS), overwrite=False)
    assert out.read_bytes() == (tmp_path / "ref.jsonl").read_bytes()

    # 2. A part committed again after it was assembled: the output has the new vectors.
    out = tmp_path / "b.jsonl"
    cp = Checkpoint.open(out, settings, resume=False)
    for k in range(len(TEXTS)):
        commit(cp, k, names)
    ones = {n: np.ones((5, 6 + j), np.float32) for j, n in enumerate(names)}
    cp.commit(1, 5, texts_digest(TEXTS[1]), ones)
    cp.publish(len(TEXTS), overwrite=False)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(20))
    assert all(r["mean"] == [1.0] * 6 for r in rows[5:10]) and rows[0]["mean"] != [1.0] * 6

    # 3. Publish failing after the output was assembled (its record cannot be written):
    # a second publish assembles it again, whole.
    out = tmp_path / "c.jsonl"
    cp = Checkpoint.open(out, settings, resume=False, metadata={"record": 1})
    for k in range(len(TEXTS)):
        commit(cp, k, names)
    sidecar_path(out).mkdir()
    with pytest.raises(IsADirectoryError):
        cp.publish(len(TEXTS), overwrite=False)
    assert not out.exists() and not list(work_dir_for(out).glob("assembled.*"))
    sidecar_path(out).rmdir()
    cp.publish(len(TEXTS), overwrite=False)
    assert out.read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    assert json.loads(sidecar_path(out).read_text()) == {"record": 1}


def test_publish_refuses_existing_output_and_keeps_the_work(tmp_path):
    out = tmp_path / "out.npy"
    cp = Checkpoint.open(out, SETTINGS, resume=False)
    for k in range(len(TEXTS)):
        commit(cp, k, ["mean"])
    out.write_bytes(b"someone else's file")
    with pytest.raises(CheckpointError, match="already exists; pass `overwrite=True`"):
        cp.publish(len(TEXTS), overwrite=False)
    assert out.read_bytes() == b"someone else's file" and len(cp.done) == 4
    cp.publish(len(TEXTS), overwrite=True)
    assert np.load(out).shape == (20, 6) and not work_dir_for(out).exists()
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's private 0600


def test_missing_chunk_is_not_published(tmp_path):
    out = tmp_path / "out.npy"
    cp = Checkpoint.open(out, SETTINGS, resume=False)
    commit(cp, 0, ["mean"])
    with pytest.raises(CheckpointError, match=r"parts \[1, 2\] are missing"):
        cp.publish(3, overwrite=False)
    assert not out.exists()
    cp.close()


def test_kill_between_final_rename_and_cleanup_is_recognised(tmp_path, monkeypatch):
    out = tmp_path / "out.npy"
    cp = Checkpoint.open(out, SETTINGS, resume=False)
    commit(cp, 0, ["mean"])

    def killed(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Checkpoint, "discard", killed)
    with pytest.raises(KeyboardInterrupt):
        cp.publish(1, overwrite=False)
    monkeypatch.undo()
    cp.close()
    assert np.load(out).shape == (5, 6) and Checkpoint.finished(out)
    assert not Checkpoint.finished(tmp_path / "other.npy")


def test_unwritable_output_directory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(
        CheckpointError, match=r"Expected a work directory .* in .*, but poolkit cannot create it"
    ):
        Checkpoint.open(blocker / "out.npy", SETTINGS, resume=False)


def test_foreign_directory_is_not_resumed(tmp_path):
    out = tmp_path / "out.npy"
    work_dir_for(out).mkdir()
    (work_dir_for(out) / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="Expected a poolkit work directory"):
        Checkpoint.open(out, SETTINGS, resume=True)
    assert (work_dir_for(out) / "notes.txt").read_text() == "mine"


def test_model_fingerprint_sees_every_file(tmp_path):
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode": "mean"}')
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "x").write_text("ignored")
    first = model_fingerprint(tmp_path)
    assert sorted(first) == ["1_Pooling/config.json", "config.json"]
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode": "cls"}')
    second = model_fingerprint(tmp_path)
    assert second["config.json"] == first["config.json"]
    assert second["1_Pooling/config.json"] != first["1_Pooling/config.json"]


def test_chunk_damaged_after_the_resume_check_is_caught_when_publishing(tmp_path):
    out = tmp_path / "out.npy"
    cp = Checkpoint.open(out, SETTINGS, resume=False)
    for k in range(len(TEXTS)):
        commit(cp, k, ["mean"])
    cp.close()
    cp = Checkpoint.open(out, SETTINGS, resume=True)  # all four verified here
    path = sorted(work_dir_for(out).glob("chunk-00000002-*.npz"))[0]
    data = bytearray(path.read_bytes())
    data[-200] ^= 0x01  # one bit, after the check
    path.write_bytes(bytes(data))
    with pytest.raises(
        CheckpointError,
        match=rf"{path.name}: Expected a checkpoint part matching its SHA-256, but it was damaged after",
    ):
        cp.publish(len(TEXTS), overwrite=False)
    cp.close()
    assert not out.exists() and not path.exists()
    with pytest.warns(IntegrityWarning, match="missing parts 2; they will be recomputed"):
        cp = Checkpoint.open(out, SETTINGS, resume=True)
    assert cp.done == {0, 1, 3}
    cp.close()


def test_chunk_file_name_is_the_sha256_of_its_bytes(tmp_path):
    import hashlib

    out = tmp_path / "out.npy"
    cp = Checkpoint.open(out, SETTINGS, resume=False)
    commit(cp, 0, ["mean"])
    cp.close()
    (path,) = work_dir_for(out).glob("chunk-*.npz")
    assert path.name == f"chunk-00000000-{hashlib.sha256(path.read_bytes()).hexdigest()}.npz"
