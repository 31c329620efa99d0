"""``poolkit export`` of a recipe with a fitted transform (``mean/pca128``, issue #53).

The folder carries the fit: sentence-transformers loads it as a ``Dense`` module in a
process that cannot import poolkit, and the ONNX graph applies it in its output stage; both
give ``poolkit.embed(..., fit=F)`` to 1e-5 on all-MiniLM-L6-v2 (fitted on 300 STS-B
sentences, checked on the others). A fit the folder cannot carry (none, another recipe's,
another width's, another model's) is refused in one line, and nothing is written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from clitools import one_error_line, run_cli
from test_export_stage import assert_same_stored, run_onnx

import poolkit as pk
from poolkit.fitted import Fit

TOL = 1e-5  # the bound: the exported folder against poolkit.embed
EXTRA = ["hello", " ".join(["pooling turns token vectors into one vector per text"] * 60)]

# Loads each folder with sentence-transformers alone: every sys.path entry that holds a
# poolkit package is dropped first, so the folder cannot lean on poolkit's modules.
LOAD_ST = """\
import json, sys
from pathlib import Path
sys.path[:] = [p for p in sys.path if not (Path(p or ".") / "poolkit").is_dir()]
import importlib.util
assert importlib.util.find_spec("poolkit") is None, "poolkit is importable"
import numpy as np
from sentence_transformers import SentenceTransformer

folders, texts = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
out = {}
for i, folder in enumerate(folders):
    out[f"v{i}"] = SentenceTransformer(folder, device="cpu").encode(texts)
np.savez(sys.argv[3], **out)
assert not [m for m in sys.modules if m.split(".")[0] == "poolkit"], "poolkit was imported"
"""


@pytest.fixture(scope="module")
def fits(minilm_dir: Path, sts_dev: list[str]) -> dict[str, Fit]:
    """The fits of mean/pca128 and mean/whiten64 on the first 300 sentences."""
    return pk.fit(sts_dev[:300], minilm_dir, recipe=["mean/pca128", "mean/whiten64"])


@pytest.fixture(scope="module")
def texts(sts_dev: list[str]) -> list[str]:
    """Sentences the fits never saw, a short one and a truncated one."""
    return sts_dev[300:] + EXTRA


def embedded(texts: list[str], model: Path, recipe: str, fit: Fit, **kwargs) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the long text is truncated on purpose
        return pk.embed(texts, model=model, recipe=recipe, fit=fit, **kwargs)


@pytest.mark.slow
def test_sentence_transformers_folders_give_embeds_vectors_without_poolkit(
    fits, texts, minilm_dir, tmp_path
):
    cases = {"mean/pca128": (fits["mean/pca128"], 128),
             "mean/whiten64/32": (fits["mean/whiten64"], 32)}  # fmt: skip
    folders = []
    for i, (recipe, (fit, _)) in enumerate(cases.items()):
        out = pk.export(minilm_dir, tmp_path / f"st{i}", recipe=recipe, fit=fit)
        record = json.loads((out / "poolkit-export.json").read_text())
        assert record["fit"]["digest"] == fit.digest() and record["fit"]["recipe"] == fit.recipe
        assert "Fitted transform" in (out / "README.md").read_text()
        folders.append(str(out))
    # mean normalises: Normalize (the fit's input), the fit's Dense, /32's slice, Normalize.
    assert record["modules"] == ["Transformer", "Pooling", "Normalize", "Dense", "Dense",
                                 "Normalize"]  # fmt: skip
    assert json.loads((out / "config_sentence_transformers.json").read_text())["truncate_dim"] == 32
    (tmp_path / "folders.json").write_text(json.dumps(folders))
    (tmp_path / "texts.json").write_text(json.dumps(texts))
    (tmp_path / "load.py").write_text(LOAD_ST)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    r = subprocess.run([sys.executable, "load.py", "folders.json", "texts.json", "got.npz"],
                       cwd=tmp_path, env=env, capture_output=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    got = np.load(tmp_path / "got.npz")
    for i, (recipe, (fit, dims)) in enumerate(cases.items()):
        want = embedded(texts, minilm_dir, recipe, fit)
        assert got[f"v{i}"].shape == want.shape == (len(texts), dims)
        np.testing.assert_allclose(got[f"v{i}"], want, atol=TOL, rtol=0)


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["mean/pca128", "mean/pca128/int8"])
def test_onnx_graph_gives_embeds_vectors(recipe, fits, texts, minilm_dir, sts_dev, tmp_path):
    fit = fits["mean/pca128"]
    cal = sts_dev[:100] if recipe.endswith("int8") else None
    out = pk.export(minilm_dir, tmp_path / "g", recipe=recipe, format="onnx", calibration=cal,
                    fit=fit)  # fmt: skip
    got = run_onnx(out, texts)
    want, stats = embedded(texts, minilm_dir, recipe, fit, calibration=cal, return_stats=True)
    record = json.loads((out / "poolkit-export.json").read_text())
    assert record["onnx"]["output_stage"]["transform"] == "pca128"
    assert record["fit"]["digest"] == fit.digest()
    if cal is None:
        assert got.dtype == want.dtype and got.shape == want.shape == (len(texts), 128)
        np.testing.assert_allclose(got, want, atol=TOL, rtol=0)
    else:  # codes equal but where the float sits on a bucket edge (test_export_stage.py)
        floats = embedded(texts, minilm_dir, "mean/pca128", fit)
        assert_same_stored(got, want, floats, recipe, stats.calibration[recipe])


# --- refusals, in one line, nothing written --------------------------------------------


def hand_fit(recipe: str, width: int, k: int = 8, model: str = "") -> Fit:
    """A PCA-shaped fit of ``recipe`` on ``width``-wide vectors, made by hand."""
    matrix = np.eye(width, k, dtype=np.float32)
    return Fit(f"pca{k}", np.zeros(width, np.float32), matrix, recipe, model)


@pytest.mark.parametrize(
    ("recipe", "fit", "fragments"),
    [
        ("mean/pca8", None, ["`fit`", "a fit of 'mean/pca8'", "got none"]),
        ("mean/pca8/4", None, ["a fit of 'mean/pca8'"]),
        ("mean", hand_fit("mean/pca8", 384), ["which no recipe uses"]),
        ("mean/pca8", hand_fit("mean/whiten8", 384), ["a fit of 'mean/pca8'", "mean/whiten8"]),
        ("splade", hand_fit("mean/pca8", 384), ["which no recipe uses"]),
    ],
)
def test_refused_before_the_model_loads(recipe, fit, fragments, tmp_path):
    missing = tmp_path / "no-model"  # never read: the refusal comes first
    with pytest.raises(pk.InputError) as e:
        pk.export(missing, tmp_path / "out", recipe=recipe, fit=fit)
    message = str(e.value)
    assert len(message.splitlines()) == 1 and all(f in message for f in fragments), message
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_another_width_or_model_is_refused_naming_both(fits, minilm_dir, tmp_path):
    # A fit of 768-wide vectors (as mean@-1,-2:concat gives) for the 384-wide mean.
    wide = hand_fit("mean/pca8", 768)
    with pytest.raises(pk.InputError) as e:
        pk.export(minilm_dir, tmp_path / "out", recipe="mean/pca8", fit=wide, format="onnx")
    assert "384-wide vectors" in str(e.value) and "768-wide" in str(e.value), str(e.value)
    fit = fits["mean/pca128"]
    other = dataclasses.replace(fit, model="f" * 32)
    with pytest.raises(pk.InputError) as e:
        pk.export(minilm_dir, tmp_path / "out", recipe="mean/pca128", fit=other)
    message = str(e.value)
    ours = fit.model.rpartition(":")[2][:12]  # the digest's hex, as the message shortens it
    assert f"digest {ours}" in message and "f" * 12 in message, message
    assert len(message.splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_cli_fit_and_from_compare(fits, minilm_dir, tmp_path):
    fit = fits["mean/pca128"]
    fit.save(tmp_path / "pca.safetensors")
    hand_fit("mean/pca8", 384).save(tmp_path / "pca8.safetensors")
    base = ["export", str(minilm_dir), "-o", "out", "--quiet"]
    r = run_cli([*base, "--recipe", "mean/pca128"], cwd=tmp_path)
    one_error_line(r, 2, "--fit", "a fit of 'mean/pca128'")
    r = run_cli([*base, "--recipe", "mean/pca128", "--fit", "pca8.safetensors"], cwd=tmp_path)
    one_error_line(r, 2, "--fit", "mean/pca8")
    r = run_cli([*base, "--recipe", "mean", "--fit", "pca.safetensors"], cwd=tmp_path)
    one_error_line(r, 2, "--fit", "which no recipe uses")
    r = run_cli([*base, "--recipe", "mean/pca128", "--fit", "nothing.safetensors"], cwd=tmp_path)
    one_error_line(r, 2, "--fit", "nothing.safetensors")
    assert not (tmp_path / "out").exists()
    r = run_cli([*base, "--recipe", "mean/pca128", "--fit", "pca.safetensors"], cwd=tmp_path)
    assert r.returncode == 0, r.stderr.decode()
    record = json.loads((tmp_path / "out" / "poolkit-export.json").read_text())
    assert record["fit"]["digest"] == fit.digest() and record["output_dim"] == 128
    # --from-compare: a fitted top row's fit file (a path relative to the JSON's folder).
    (tmp_path / "cmp").mkdir()
    fit.save(tmp_path / "cmp" / "row.safetensors")
    row = {"recipe": "mean/pca128", "spearman": 0.9,
           "fit": {"on": "/pca128 fitted on 300 texts", "file": "row.safetensors", "seconds": 1}}  # fmt: skip
    doc = {"model": str(minilm_dir), "task": "sts", "metric": "spearman", "results": [row]}
    (tmp_path / "cmp" / "r.json").write_text(json.dumps(doc))
    r = run_cli(["export", str(minilm_dir), "-o", "fromcmp", "--quiet", "--from-compare",
                 "cmp/r.json"], cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    record = json.loads((tmp_path / "fromcmp" / "poolkit-export.json").read_text())
    assert record["recipe"] == "mean/pca128" and record["fit"]["digest"] == fit.digest()
    assert "fitted on 300 texts" in (tmp_path / "fromcmp" / "README.md").read_text()
    # A row whose fit compare did not save: --fit names the way out.
    row["fit"]["file"] = None
    (tmp_path / "cmp" / "r.json").write_text(json.dumps(doc))
    r = run_cli(["export", str(minilm_dir), "-o", "unsaved", "--from-compare", "cmp/r.json"],
                cwd=tmp_path)  # fmt: skip
    one_error_line(r, 2, "--fit", "was not saved")
    assert not (tmp_path / "unsaved").exists()
