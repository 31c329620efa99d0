"""``poolkit.plan``: a request resolved once, run on every dense path."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import poolkit
from poolkit.output import Calibration
from poolkit.plan import make_plan
from poolkit.recipe import Recipe

TEXTS = ["John works at Google.", "A man is playing a guitar.", "Short"]


def _recipes(*names: str) -> dict[str, Recipe]:
    return {n: Recipe.parse(n) for n in names}


def test_outputs_are_known_before_running_and_match_what_runs(minilm):
    recipes = _recipes("mean", "cls+mean", "mean/128/int8", "max/200/binary", "mean/float16")
    ranges = {"mean/128/int8": Calibration.from_vectors(
        poolkit.embed(TEXTS, minilm, recipe="mean/128"), "test")}  # fmt: skip
    plan = make_plan(minilm, recipes, calibration=ranges)
    outputs = plan.outputs()
    got, stats = plan.run(minilm, TEXTS)
    for name, out in outputs.items():
        arr = got[name]
        assert arr.dtype == out.dtype and stats.dims[name] == out.dims
        assert arr.shape == (len(TEXTS), arr.nbytes // len(TEXTS) // arr.itemsize)
        assert arr[0].nbytes == out.bytes_per_vector  # what one stored row takes
        want = poolkit.embed(TEXTS, minilm, recipe=name,
                             calibration=ranges.get(name))  # fmt: skip
        np.testing.assert_array_equal(arr, want)
    assert [o.dims for o in outputs.values()] == [384, 768, 128, 200, 384]
    assert [o.bytes_per_vector for o in outputs.values()] == [1536, 3072, 128, 25, 768]


def test_plan_refuses_before_running(minilm):
    with pytest.raises(ValueError, match="384"):
        make_plan(minilm, _recipes("mean/512"))
    with pytest.raises(ValueError, match="calibration"):
        make_plan(minilm, _recipes("mean/int8"), calibration={})
    # Without calibration the plan still says its outputs (e.g. to size a job).
    assert make_plan(minilm, _recipes("mean/int8")).outputs()["mean/int8"].dims == 384


def test_plan_pickles_and_runs_the_same_elsewhere(minilm):
    plan = make_plan(minilm, _recipes("mean", "cls/64/binary"), prompt="query: ")
    again = pickle.loads(pickle.dumps(plan))
    a, _ = plan.run(minilm, TEXTS)
    b, _ = again.run(minilm, TEXTS)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    np.testing.assert_array_equal(a["mean"], poolkit.embed(TEXTS, minilm, "mean", prompt="query: "))


@pytest.mark.parametrize(
    "flags",
    [
        ["--recipe", "mean/int8", "--calibrate", "calib.txt"],  # ranges taken with the plan
        ["--recipe", "mean", "--chunks", "tokens:8", "--part-size", "2"],  # three parts
        ["--recipe", "mean/int8", "--chunks", "tokens:8:2", "--late", "--part-size", "2"],
    ],
    ids=["int8-calibrate", "chunks", "late-int8"],
)
def test_an_embed_command_builds_its_plan_once(flags, tiny_dirs, tmp_path, monkeypatch):
    """The plan is resolved once per command (plan.py's promise): not again for the int8
    ranges, nor per part of a chunked job. Every plan is built through head_plan."""
    from clitools import run_cli

    import poolkit.plan

    builds = []
    real = poolkit.plan.head_plan

    def counted(*args, **kwargs):
        builds.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(poolkit.plan, "head_plan", counted)
    docs = [f"document {i} " + "with some words " * (3 + i) for i in range(5)]
    (tmp_path / "docs.txt").write_text("\n".join(docs) + "\n", encoding="utf-8")
    (tmp_path / "calib.txt").write_text("\n".join(docs[::-1]) + "\n", encoding="utf-8")
    out = run_cli(["embed", "docs.txt", "-o", "out.parquet", "--model",
                   str(tiny_dirs["bert_cls"]), *flags], cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr.decode()
    assert (tmp_path / "out.parquet").exists()
    assert len(builds) == 1, builds


@pytest.mark.parametrize(
    ("family", "recipe", "out"),
    [
        ("dense", "mean/raw", "out.npy"),
        ("sparse", "splade/top8", "out.npz"),
        ("multivector", "multivector:tokens", "out.parquet"),
    ],
)
def test_each_family_runs_the_one_plan_of_the_registry(family, recipe, out, tmp_path, monkeypatch):
    """Every family's job is resolved by its registered planner (poolkit.families), once for
    all its parts, and the rows written are that plan's: a counting planner, registered in
    the family's place, sees one call and the vectors equal poolkit.embed's."""
    import warnings

    from clitools import run_cli
    from tiny_models import build_mlm, build_multivector

    import poolkit
    import poolkit.families as families

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        build = build_multivector if family == "multivector" else build_mlm
        model = build("bert_dense", tmp_path / "model")
    families._planner(family)  # the built-in registers itself
    real, calls = families._planners[family], []

    def counted(encoder, recipes, **request):
        calls.append(sorted(recipes))
        return real(encoder, recipes, **request)

    monkeypatch.setitem(families._planners, family, counted)
    texts = [f"text {i} " + "with some words " * (1 + i) for i in range(5)]
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    run = run_cli(["embed", "in.txt", "-o", out, "--model", str(model), "--recipe", recipe,
                   "--part-size", "2"], cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr.decode()
    assert calls == [[recipe]]
    calls.clear()
    want = poolkit.embed(texts, str(model), recipe)
    assert len(calls) == 1  # the library call too
    if family == "dense":
        np.testing.assert_allclose(np.load(tmp_path / out), want, atol=1e-6)
    elif family == "sparse":
        import scipy.sparse as sp

        got = sp.load_npz(tmp_path / out)
        np.testing.assert_allclose(got.toarray(), want.toarray(), atol=1e-6)
    else:
        import pyarrow.parquet as pq

        rows = pq.read_table(tmp_path / out)[recipe].to_pylist()  # a (tokens, D) list a text
        assert len(rows) == len(want)
        for got, one in zip(rows, want, strict=True):
            np.testing.assert_allclose(np.asarray(got, np.float32), one, atol=1e-6)
