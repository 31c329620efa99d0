"""Fitted transforms (#53, docs/fitted.md): /pcaK, /whiten[K], /abttD against independent
references (scikit-learn's PCA, the BERT-whitening paper's numpy recipe, all-but-the-top
written out), the fit file, the recipe grammar, and the paths that apply a fit (library,
CLI) against each other and by hand."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from clitools import one_error_line
from clitools import poolkit as run

import poolkit
from poolkit import Recipe
from poolkit.errors import InputError
from poolkit.fitted import Fit, FitError, fit_transform, load_fit

PCA = pytest.importorskip("sklearn.decomposition").PCA


@pytest.fixture(scope="module")
def points() -> np.ndarray:
    """300 correlated 48-dimensional points (a few strong directions, as sentence vectors
    have), float32."""
    rng = np.random.default_rng(7)
    basis = rng.normal(size=(48, 48))
    scale = np.geomspace(8.0, 0.05, 48)
    return ((rng.normal(size=(300, 48)) * scale) @ basis + 3.0).astype(np.float32)


def _same_up_to_sign(ours: np.ndarray, ref: np.ndarray, atol: float) -> None:
    """Columns equal up to each column's sign (eigenvectors have no sign of their own)."""
    signs = np.sign(np.sum(ours * ref, axis=0))
    assert np.all(signs != 0)
    np.testing.assert_allclose(ours * signs, ref, atol=atol, rtol=0)


def test_pca_is_scikit_learns(points) -> None:
    fit = fit_transform(points, "pca8", recipe="mean/pca8")
    ref = PCA(8, svd_solver="full").fit(points.astype(np.float64))
    _same_up_to_sign(fit.apply(points), ref.transform(points.astype(np.float64)), 1e-3)
    np.testing.assert_allclose(fit.mean, ref.mean_, atol=1e-4)


def test_whitening_is_the_papers_numpy_recipe_and_scikit_learns(points) -> None:
    # Su et al. 2021 (BERT-whitening): W = U diag(1/sqrt(s)) from the SVD of np.cov.
    x = points.astype(np.float64)
    u, s, _ = np.linalg.svd(np.cov(x.T))
    paper = (x - x.mean(axis=0)) @ (u @ np.diag(1 / np.sqrt(s)))
    _same_up_to_sign(fit_transform(points, "whiten", recipe="mean/whiten").apply(points),
                     paper, 2e-3)  # fmt: skip
    _same_up_to_sign(fit_transform(points, "whiten6", recipe="mean/whiten6").apply(points),
                     paper[:, :6], 2e-4)  # fmt: skip
    sk = PCA(6, whiten=True, svd_solver="full").fit_transform(x)
    _same_up_to_sign(fit_transform(points, "whiten6", recipe="mean/whiten6").apply(points),
                     sk, 2e-4)  # fmt: skip


def test_all_but_the_top_removes_the_mean_and_the_top_directions(points) -> None:
    x = points.astype(np.float64)
    top = PCA(3, svd_solver="full").fit(x).components_  # (3, D), unit rows
    centred = x - x.mean(axis=0)
    ref = centred - (centred @ top.T) @ top
    out = fit_transform(points, "abtt3", recipe="mean/abtt3").apply(points)
    assert out.shape == points.shape
    np.testing.assert_allclose(out, ref, atol=2e-3, rtol=0)
    # What is left has no variance along the removed directions.
    assert np.abs(out @ top.T).max() < 1e-2


def test_a_row_never_depends_on_the_rows_beside_it(points) -> None:
    fit = fit_transform(points, "pca16", recipe="mean/pca16")
    whole = fit.apply(points)
    for i in range(0, len(points), 17):
        assert np.array_equal(fit.apply(points[i : i + 1]), whole[i : i + 1])
    assert np.array_equal(fit.apply(points[::-1]), whole[::-1])
    assert np.array_equal(fit.apply(points[5:40]), whole[5:40])


def test_the_same_vectors_give_the_same_fit_and_file(points, tmp_path) -> None:
    a = fit_transform(points, "pca8", recipe="mean/pca8", source="300 points")
    b = fit_transform(points.copy(), "pca8", recipe="mean/pca8", source="300 points")
    a.save(tmp_path / "a.safetensors")
    b.save(tmp_path / "b.safetensors")
    assert (tmp_path / "a.safetensors").read_bytes() == (tmp_path / "b.safetensors").read_bytes()
    back = load_fit(tmp_path / "a.safetensors")
    assert back == a and np.array_equal(back.matrix, a.matrix)
    assert np.array_equal(back.mean, a.mean)
    assert (back.recipe, back.texts, back.source, back.transform) == (
        "mean/pca8", 300, "300 points", "pca8")  # fmt: skip


def test_a_damaged_or_foreign_file_is_refused_in_one_line(points, tmp_path) -> None:
    fit = fit_transform(points, "pca8", recipe="mean/pca8")
    good = fit.save(tmp_path / "fit.safetensors")
    data = good.read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) // 2])
    (tmp_path / "text.safetensors").write_text("not a fit\n")
    from safetensors.numpy import save_file

    save_file({"x": np.zeros(3, np.float32)}, str(tmp_path / "other.safetensors"))
    for name, words in (("cut", "not one"), ("text", "not one"), ("other", "poolkit-fit"),
                        ("missing", "readable")):  # fmt: skip
        with pytest.raises(FitError, match=words) as e:
            load_fit(tmp_path / f"{name}.safetensors")
        assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("transform", "rows", "words"),
    [
        ("pca8", 8, "at least 9 texts"),
        ("pca64", 300, "at most 48 directions"),
        ("abtt48", 300, "fewer than 48"),
        ("whiten", 20, "at least 49 texts"),
    ],
)
def test_fits_that_cannot_be_made_are_refused(points, transform, rows, words) -> None:
    with pytest.raises(FitError, match=words):
        fit_transform(points[:rows], transform, recipe=f"mean/{transform}")


def test_directions_with_no_variance_are_set_to_zero_not_blown_up() -> None:
    # 8 dimensions, the texts vary in 3 of them (a constant offset in the others): whitening
    # gives those 3 unit variance and the other 5 zeros, never float noise divided by ~0.
    rng = np.random.default_rng(0)
    flat = np.full((100, 8), 0.25, np.float32)
    flat[:, :3] = rng.normal(size=(100, 3))
    out = fit_transform(flat, "whiten", recipe="mean/whiten").apply(flat)
    assert out.shape == (100, 8) and np.isfinite(out).all()
    np.testing.assert_allclose(np.sort(out.var(axis=0, ddof=1))[-3:], 1.0, atol=1e-4)
    assert np.abs(np.sort(np.abs(out).max(axis=0))[:5]).max() < 1e-5


@pytest.mark.parametrize(
    "name",
    [
        "mean/pca128",
        "mean/whiten",
        "mean/whiten256/int8",
        "cls+mean@last4/l2/abtt3/64/binary",
        "mean_no_special/raw/pca32/16/float16",
    ],
)
def test_fitted_names_round_trip(name) -> None:
    r = Recipe.parse(name)
    assert str(r) == name and Recipe.parse(str(r)) == r
    assert Recipe.from_json(json.loads(json.dumps(r.to_json()))) == r
    assert r.to_json()["version"] == 5
    assert r.pooling.transform is None and not r.pooling.has_output_stage
    assert r.fitted is not None and r.fitted.dims is None and r.fitted.precision is None
    assert r.fitted.transform == r.transform


def test_fitted_recipe_widths() -> None:
    assert Recipe.parse("mean/pca128").output_dim(384) == 128
    assert Recipe.parse("mean/whiten").output_dim(384) == 384
    assert Recipe.parse("mean/abtt2/64").output_dim(384) == 64
    assert Recipe.parse("cls+mean/pca100").output_dim(384) == 100
    with pytest.raises(InputError, match="at most 384"):
        Recipe.parse("mean/pca512").output_dim(384)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("mean/pca", "/pcaK"),
        ("mean/abtt", "/abttD"),
        ("mean/pca0", "/pcaK"),
        ("word:first/pca8", "word level"),
        ("span:endpoints/whiten", "span level"),
        ("splade/pca8", "sparse level"),
        ("multivector:tokens/pca8", "multivector level"),
        ("mean/pca8/pca16", "at most one"),
    ],
)
def test_fitted_names_refused_in_one_line(name, words) -> None:
    with pytest.raises(InputError, match=words) as e:
        Recipe.parse(name)
    assert "\n" not in str(e.value)


# ------------------------------------------------------------------------ the real model


@pytest.fixture(scope="module")
def corpus(sts_dev) -> list[str]:
    return sts_dev[:240]


@pytest.fixture(scope="module")
def pca(corpus, minilm_dir) -> Fit:
    return poolkit.fit(corpus, minilm_dir, recipe="mean/pca32", device="cpu")


def test_embed_applies_the_fit_as_written_by_hand(corpus, minilm_dir, pca, sts_dev) -> None:
    texts = sts_dev[240:300]
    base = poolkit.embed(texts, minilm_dir, recipe="mean", device="cpu")  # unit vectors
    by_hand = (base.astype(np.float64) - pca.mean) @ pca.matrix.astype(np.float64)
    by_hand /= np.linalg.norm(by_hand, axis=1, keepdims=True)  # MiniLM normalises
    out = poolkit.embed(texts, minilm_dir, recipe="mean/pca32", fit=pca, device="cpu")
    assert out.shape == (60, 32) and out.dtype == np.float32
    np.testing.assert_allclose(out, by_hand, atol=1e-6, rtol=0)
    # /raw: neither the pooled nor the transformed vectors are normalised.
    raw_fit = poolkit.fit(corpus, minilm_dir, recipe="mean/raw/pca32", device="cpu")
    raw = poolkit.embed(texts, minilm_dir, recipe="mean/raw/pca32", fit=raw_fit, device="cpu")
    base_raw = poolkit.embed(texts, minilm_dir, recipe="mean/raw", device="cpu")
    np.testing.assert_allclose(raw, raw_fit.apply(base_raw), atol=1e-6, rtol=0)
    # The fit was made on the same vectors poolkit.embed gives for the corpus.
    assert pca.texts == 240 and pca.model and pca.recipe == "mean/pca32"


def test_one_text_or_many_the_same_bits(corpus, minilm_dir, pca, sts_dev) -> None:
    texts = sts_dev[240:260]
    many = poolkit.embed(texts, minilm_dir, recipe="mean/pca32", fit=pca, device="cpu")
    base_many = poolkit.embed(texts, minilm_dir, recipe="mean", device="cpu")
    for i in (0, 7, 19):
        base_one = poolkit.embed(texts[i : i + 1], minilm_dir, recipe="mean", device="cpu")
        one = poolkit.embed(texts[i : i + 1], minilm_dir, recipe="mean/pca32", fit=pca,
                            device="cpu")  # fmt: skip
        if np.array_equal(base_one[0], base_many[i]):  # the model's bits the same: ours too
            assert np.array_equal(one[0], many[i])
        else:  # a CPU whose kernels depend on the batch (docs/equality.md)
            np.testing.assert_allclose(one[0], many[i], atol=1e-6, rtol=0)


def test_output_stage_after_the_fit(corpus, minilm_dir, pca, sts_dev) -> None:
    texts = sts_dev[240:280]
    floats = poolkit.embed(texts, minilm_dir, recipe="mean/pca32", fit=pca, device="cpu")
    out = poolkit.embed(texts, minilm_dir, recipe=["mean/pca32/16", "mean/pca32/int8"],
                        fit=pca, calibration=corpus, device="cpu")  # fmt: skip
    head = floats[:, :16] / np.linalg.norm(floats[:, :16], axis=1, keepdims=True)
    np.testing.assert_allclose(out["mean/pca32/16"], head, atol=1e-6, rtol=0)
    cal = poolkit.embed(corpus, minilm_dir, recipe="mean/pca32", fit=pca, device="cpu")
    lo, hi = cal.min(axis=0), cal.max(axis=0)
    codes = np.clip(np.floor((floats - lo) / ((hi - lo) / 255)), 0, 255) - 128
    assert np.abs(out["mean/pca32/int8"].astype(int) - codes).max() <= 1  # bucket edges


def test_a_fit_for_something_else_is_refused_naming_both(minilm_dir, pca, sts_dev) -> None:
    texts = sts_dev[:3]
    cases = [
        ({"recipe": "mean/pca32"}, "a fit of 'mean/pca32'"),
        ({"recipe": "mean/pca16", "fit": pca}, "fits of mean/pca32"),
        ({"recipe": "mean", "fit": pca}, "without a fitted transform"),
        (
            {"recipe": "mean/pca32", "fit": dataclasses.replace(pca, model="xxh3_128:0badc0de")},
            "made with model 0badc0de",
        ),
        ({"recipe": "mean/pca32", "fit": [pca, pca]}, "one fit per recipe"),
        ({"recipe": "mean/pca32", "fit": 3}, "a Fit, a fit file"),
    ]
    for kwargs, words in cases:
        with pytest.raises(poolkit.PoolkitError, match=words) as e:
            poolkit.embed(texts, minilm_dir, device="cpu", **kwargs)
        assert "\n" not in str(e.value)
    narrow = dataclasses.replace(pca, mean=pca.mean[:300], matrix=pca.matrix[:300])
    with pytest.raises(InputError, match="300-wide") as e:
        poolkit.embed(texts, minilm_dir, recipe="mean/pca32", fit=narrow, device="cpu")
    assert "384-wide" in str(e.value)


def test_embed_command_with_fit_is_the_library(tmp_path, minilm_dir, pca, sts_dev) -> None:
    texts = sts_dev[240:300]
    (tmp_path / "docs.txt").write_text("\n".join(texts) + "\n")
    pca.save(tmp_path / "pca.safetensors")
    model = ["-m", str(minilm_dir), "--device", "cpu", "-q"]
    r = run("embed", "docs.txt", "-o", "out.npy", "--recipe", "mean/pca32", "--fit",
            "pca.safetensors", "--part-size", "25", *model, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    lib = poolkit.embed(texts, minilm_dir, recipe="mean/pca32", fit=pca, device="cpu")
    parts = np.load(tmp_path / "out.npy")
    one_batch = [poolkit.embed(texts[i : i + 25], minilm_dir, recipe="mean/pca32", fit=pca,
                               device="cpu") for i in range(0, 60, 25)]  # fmt: skip
    assert np.array_equal(parts, np.concatenate(one_batch))  # the parts as the library runs them
    np.testing.assert_allclose(parts, lib, atol=1e-6, rtol=0)
    record = json.loads((tmp_path / "out.npy.poolkit.json").read_text())
    fit = record["columns"]["mean/pca32"]["fit"]
    assert fit["digest"] == pca.digest() and fit["texts"] == 240


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--recipe", "mean/pca32"], ["--fit", "the fit file of 'mean/pca32'"]),
        (["--recipe", "mean", "--fit", "pca.safetensors"], ["--fit", "a fit of 'mean/pca32'"]),
        (["--recipe", "mean/pca32", "--fit", "docs.txt"], ["--fit", "not one"]),
        (["--recipe", "mean/pca32", "--fit", "nope.safetensors"], ["--fit", "readable"]),
    ],
)
def test_embed_fit_flag_refusals(tmp_path, pca, argv, words) -> None:
    (tmp_path / "docs.txt").write_text("one\ntwo\n")
    pca.save(tmp_path / "pca.safetensors")
    r = run("embed", "docs.txt", "-o", "out.npy", *argv, cwd=tmp_path)
    one_error_line(r, 2, *words)
    assert not (tmp_path / "out.npy").exists()


def test_poolkit_fit_refuses_a_recipe_without_a_transform(minilm_dir, sts_dev) -> None:
    with pytest.raises(InputError, match="fitted transform"):
        poolkit.fit(sts_dev[:20], minilm_dir, recipe="mean", device="cpu")


def test_fit_files_from_the_library_load_in_embed(tmp_path: Path, minilm_dir, pca) -> None:
    path = pca.save(tmp_path / "f.safetensors")
    texts = ["a cat sat", "a dog ran"]
    a = poolkit.embed(texts, minilm_dir, recipe="mean/pca32", fit=path, device="cpu")
    b = poolkit.embed(texts, minilm_dir, recipe="mean/pca32", fit=str(path), device="cpu")
    c = poolkit.embed(texts, minilm_dir, recipe="mean/pca32", fit={"x": pca}, device="cpu")
    assert np.array_equal(a, b) and np.array_equal(a, c)


def test_a_trained_projection_finds_what_pca_misses_and_is_seeded() -> None:
    # 8 dimensions of equal variance; pair similarity lives in the first 4 only. PCA to 4
    # picks directions at random; the projection trained on the gold scores (CoSENT) must
    # find the 4 that matter and rank unseen pairs better.
    from scipy.stats import spearmanr

    from poolkit.trained import train_projection

    rng = np.random.default_rng(1)
    n = 1000
    a, b = rng.normal(size=(n, 8)), rng.normal(size=(n, 8))
    mix = rng.uniform(0, 1, size=(n, 1))
    b[:, :4] = mix * a[:, :4] + (1 - mix) * b[:, :4]  # pair i: as similar as mix_i says
    gold = np.round(mix[:, 0] * 5, 1)
    a, b = a.astype(np.float32), b.astype(np.float32)
    train, test = slice(0, 700), slice(700, n)

    def score(fit):
        pa, pb = fit.apply(a[test]), fit.apply(b[test])
        cos = (pa * pb).sum(1) / np.linalg.norm(pa, axis=1) / np.linalg.norm(pb, axis=1)
        return spearmanr(cos, gold[test]).statistic

    def trained(**kw):
        return train_projection(a[train], b[train], gold[train], "proj4", recipe="x/proj4",
                                epochs=20, lr=3e-2, **kw)  # fmt: skip

    pca = fit_transform(np.vstack([a[train], b[train]]), "pca4", recipe="x/pca4")
    proj = trained()
    assert score(proj) > score(pca) + 0.15, (score(proj), score(pca))
    again = trained()
    assert np.array_equal(again.matrix, proj.matrix) and again.extra == proj.extra
    assert not np.array_equal(trained(seed=5).matrix, proj.matrix)
    # No epoch: the start (PCA of the pairs' vectors) is what it gives.
    none = train_projection(a[train], b[train], gold[train], "proj4", recipe="x/proj4", epochs=0)
    assert np.array_equal(none.matrix, pca.matrix) and none.extra["best_epoch"] == "0"


def test_a_projection_needs_labelled_pairs() -> None:
    from poolkit.trained import train_projection

    x = np.zeros((10, 8), np.float32)
    with pytest.raises(FitError, match="at least 20 pairs"):
        train_projection(x, x, np.arange(10.0), "proj4", recipe="x/proj4")
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(30, 8)).astype(np.float32), rng.normal(size=(30, 8)).astype(np.float32)
    with pytest.raises(FitError, match="at least 65 pair sides"):
        train_projection(a, b, np.arange(30.0), "proj64", recipe="x/proj64")
    # The held-out tenth (the seeded draw's first 10 pairs) sees one gold value only.
    order = np.random.default_rng(0).permutation(30)
    one_value = np.where(np.isin(np.arange(30), order[:10]), 0.0, np.arange(30.0))
    with pytest.raises(FitError, match="held-out pairs with two distinct gold scores"):
        train_projection(a, b, one_value, "proj4", recipe="x/proj4")
    with pytest.raises(FitError, match="projK"):
        train_projection(x, x, np.arange(10.0), "pca4", recipe="x/pca4")


def test_a_trained_retrieval_projection_finds_the_subspace_that_ranks() -> None:
    # Documents of 8 equal-variance dimensions; a query matches its document in the first 4
    # only. PCA to 4 picks directions at random; InfoNCE on the judged pairs must find the
    # 4 that rank, on unseen queries.
    from poolkit.trained import train_retrieval_projection

    rng = np.random.default_rng(2)
    n = 400
    d = rng.normal(size=(n, 8)).astype(np.float32)
    pos = rng.integers(0, n, size=n)
    q = rng.normal(size=(n, 8))
    q[:, :4] = d[pos, :4] + 0.5 * rng.normal(size=(n, 4))
    q = q.astype(np.float32)
    train, test = np.arange(300), np.arange(300, n)

    def mrr(fit):
        a, b = fit.apply(q[test]), fit.apply(d)
        s = (a / np.linalg.norm(a, axis=1, keepdims=True)) @ (
            b / np.linalg.norm(b, axis=1, keepdims=True)).T  # fmt: skip
        own = s[np.arange(len(test)), pos[test]]
        return np.mean(1 / ((s > own[:, None]).sum(1) + 1))

    def trained(**kw):
        return train_retrieval_projection(q, d, np.stack([train, pos[train]], 1),
                                          np.full(n, -1), "proj4", recipe="x/proj4",
                                          epochs=20, lr=3e-2, **kw)  # fmt: skip

    pca = fit_transform(d, "pca4", recipe="x/pca4")
    proj = trained()
    assert mrr(proj) > mrr(pca) + 0.15, (mrr(proj), mrr(pca))
    assert np.array_equal(trained().matrix, proj.matrix)
    assert proj.extra["loss"] == "infonce" and int(proj.extra["best_epoch"]) > 0
