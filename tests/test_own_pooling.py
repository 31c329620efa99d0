"""A user's own pooling (#51): a function installed as a separate package (entry-point group
``poolkit.poolings``, tests/pooling_plugins.py) or registered at run time is a sequence
strategy like the built-ins, checked against the same function applied by hand to
sentence-transformers' token embeddings."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from clitools import command, poolkit
from pooling_plugins import forget_installed, write_plugins
from scipy.stats import spearmanr
from testdata import fixture, read_sts_pairs

import poolkit as pk
from poolkit.errors import InputError, InputTypeError
from poolkit.poolings import user_pooling
from poolkit.sequence import sequence_embedding

TEXTS = [
    "A man is playing a guitar.",
    "hello",
    "The quick brown fox jumps over the lazy dog, again and again, while the cat watches.",
    "Prices rose 3.5% in 2024 (see table 7).",
    "Zwei Hunde spielen im Schnee.",
]


@pytest.fixture(scope="session")
def plugin_dir(tmp_path_factory):
    return write_plugins(tmp_path_factory.mktemp("plugins"))


@pytest.fixture
def installed(plugin_dir, monkeypatch):
    """poolkit-powermean installed (its folder first on sys.path), read afresh."""
    monkeypatch.syspath_prepend(str(plugin_dir))
    forget_installed()
    import poolkit_powermean

    yield poolkit_powermean
    forget_installed()


@pytest.fixture
def badpool(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(write_plugins(tmp_path, "poolkit-badpool")))
    forget_installed()
    yield
    forget_installed()


@pytest.fixture
def registered():
    names: list[str] = []
    yield names
    for name in names:
        pk.unregister_pooling(name)


def by_hand(fn, token_embeddings) -> np.ndarray:
    """``fn`` on each text's own (unpadded) token embeddings, one text at a time."""
    rows = []
    for t in token_embeddings:
        t = torch.as_tensor(t, dtype=torch.float32)
        out = fn(t[None], torch.ones(1, len(t), dtype=torch.int64))
        rows.append(np.asarray(out, dtype=np.float64)[0])
    return np.stack(rows)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


# --- the registry and its refusals (no model) -----------------------------------------------


def test_entry_point_plugin_is_found_lazily_and_named_by_its_package(installed):
    found = user_pooling("power_mean")
    assert (found.package, found.version, found.ref) == (
        "poolkit-powermean", "0.1", "poolkit_powermean:power_mean")  # fmt: skip
    assert {"power_mean", "first_last", "numpy_max"} <= set(pk.poolings.pooling_names())
    r = pk.Recipe.parse("power_mean@last4:concat/l2/512/int8")
    assert str(r) == "power_mean@last4:concat/l2/512/int8" and r.pooled_dim(384) == 4 * 384
    assert pk.Recipe.parse("first_last+mean_no_special").pooled_dim(8) == 16


def test_user_pooling_pools_padded_batches_as_each_text_alone(installed):
    gen = torch.Generator().manual_seed(0)
    h = torch.randn(3, 6, 8, generator=gen)
    h[1, 4:] = float("nan")  # padding: never reaches the function (zeroed first)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [0, 0, 1, 1, 1, 1]])
    for name in ("power_mean", "first_last", "numpy_max"):
        fn = getattr(installed, name)
        want = by_hand(fn, [h[i][mask[i].bool()] for i in range(3)])
        got = sequence_embedding(h, mask, name)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
        np.testing.assert_allclose(got.numpy(), want, atol=1e-6)
        # NumPy in, NumPy out; concatenated with a built-in in the order asked
        both = sequence_embedding(h.numpy(), mask.numpy(), f"mean+{name}")
        assert isinstance(both, np.ndarray) and both.shape == (3, 16)
        np.testing.assert_allclose(both[:, 8:], want, atol=1e-6)


def test_register_pooling_refuses_built_in_names_and_keywords(registered):
    def f(h, m):
        return h.sum(1)

    for name in ("mean", "cls", "splade", "tokens", "int8", "mean_no_special", "Mean", "a-b"):
        with pytest.raises(InputError) as e:
            pk.register_pooling(name, f)
        assert "\n" not in str(e.value) and repr(name) in str(e.value)
        assert "test_own_pooling:" in str(e.value)  # names the function
    with pytest.raises(InputTypeError):
        pk.register_pooling("x", 3)
    pk.register_pooling("summed", f)
    registered.append("summed")
    with pytest.raises(InputError, match="overwrite=True"):
        pk.register_pooling("summed", f)
    pk.register_pooling("summed", f, overwrite=True)


def test_a_plugin_name_clashing_with_a_built_in_is_refused_in_one_line(badpool):
    with pytest.warns(UserWarning) as seen:
        assert user_pooling("wrong_shape") is not None
    (w,) = [str(x.message) for x in seen]
    assert "\n" not in w and "poolkit-badpool 0.2" in w and "'mean'" in w
    assert pk.Recipe.parse("mean").pooled_dim(4) == 4  # mean stays the built-in
    assert sequence_embedding(np.ones((1, 2, 4), np.float32), None, "mean").tolist() == [[1.0] * 4]


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("wrong_shape", "a result of shape (2, D), one row per text, but it returned shape (2, 3, 8)"),
        ("nan_pool", "finite values, but it returned NaN or inf in row(s) [0, 1]"),
        ("int_pool", "a float result, but it returned dtype int64"),
    ],
)  # fmt: skip
def test_a_plugin_breaking_the_rules_is_refused_in_one_line_naming_it(badpool, name, said):
    with pytest.warns(UserWarning):  # the 'mean' entry point, ignored
        pk.poolings.pooling_names()
    recipe = pk.Recipe.parse(f"{name}/l2")  # the name is known; the function not yet called
    with pytest.raises(InputError) as e:
        recipe.pooled_dim(8)  # the width: one checked call, before any model runs
    msg = str(e.value)
    plugin = f"pooling {name!r} (plugin poolkit-badpool 0.2, poolkit_badpool:{name})"
    assert "\n" not in msg and plugin in msg and said in msg, msg
    with pytest.raises(InputError, match="poolkit-badpool"):
        sequence_embedding(torch.ones(2, 3, 8), None, name)


def test_unknown_names_still_say_the_forms(installed):
    with pytest.raises(InputError, match="or a registered pooling") as e:
        pk.Recipe.parse("power_meen")
    assert "Closest valid name: power_mean." in str(e.value)


def test_nn_pooler_runs_the_function_with_gradients(installed):
    from poolkit.nn import Pooler

    pooler = Pooler("first_last+mean")
    assert pooler.output_dim(8) == 16
    h = torch.randn(2, 5, 8, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    out = pooler(h, mask)
    want = by_hand(installed.first_last, [h.detach()[0], h.detach()[1, :3]])
    np.testing.assert_allclose(out[:, :8].detach().numpy(), want, atol=1e-6)
    out.sum().backward()
    grad = h.grad
    assert grad is not None and bool((grad[1, 3:] == 0).all())  # padding: no gradient
    assert bool((grad[0, 0] != 0).all())


# --- the real model -------------------------------------------------------------------------


@pytest.mark.slow
def test_embed_equals_the_function_on_sentence_transformers_token_embeddings(
    installed, minilm_dir, minilm_st
):
    tokens = minilm_st.encode(TEXTS, output_value="token_embeddings")
    for name in ("power_mean", "first_last"):
        want = by_hand(getattr(installed, name), tokens)
        raw = pk.embed(TEXTS, model=minilm_dir, recipe=f"{name}/raw")
        np.testing.assert_allclose(raw, want, atol=1e-6)
        # the model normalises (its Normalize module): the recipe follows it, as for mean
        np.testing.assert_allclose(pk.embed(TEXTS, model=minilm_dir, recipe=name), unit(want),
                                   atol=1e-6)  # fmt: skip
    want = unit(by_hand(installed.power_mean, tokens))
    # /DIMS: the first 128 dimensions, L2-normalised again; /int8: those, quantised
    np.testing.assert_allclose(pk.embed(TEXTS, model=minilm_dir, recipe="power_mean/128"),
                               unit(want[:, :128]), atol=1e-6)  # fmt: skip
    from poolkit.output import Calibration, quantize

    cal = Calibration.from_vectors(unit(want[:, :128]).astype(np.float32))
    got = pk.embed(TEXTS, model=minilm_dir, recipe="power_mean/128/int8", calibration=cal)
    assert got.dtype == np.int8
    assert np.abs(got.astype(int) - quantize(unit(want[:, :128]), "int8", cal)).max() <= 1


@pytest.mark.slow
def test_layers_mix_before_the_function(installed, minilm_dir):
    from transformers import AutoModel, AutoTokenizer

    tok, model = AutoTokenizer.from_pretrained(minilm_dir), AutoModel.from_pretrained(minilm_dir)
    layers = []
    for text in TEXTS:
        with torch.inference_mode():
            out = model(**tok(text, return_tensors="pt"), output_hidden_states=True)
        layers.append(torch.stack(out.hidden_states[-4:]).mean(0)[0])
    want = by_hand(installed.power_mean, layers)
    got = pk.embed(TEXTS, model=minilm_dir, recipe="power_mean@last4/raw")
    # The layer mean is summed in another order here: compared before the cube root, which
    # magnifies float32 rounding near 0 (its slope is unbounded there).
    np.testing.assert_allclose(got.astype(np.float64) ** 3, want**3, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_compare_row_on_sts_b_is_the_function_by_hand_and_its_command_reproduces_it(
    installed, plugin_dir, minilm_st, tmp_path
):
    sample = fixture("stsb-dev-sample.csv")
    result = poolkit("compare", str(sample), "--task", "sts", "--recipes", "power_mean",
                     "mean", "--json", "sts.json", "--quiet", cwd=tmp_path)  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    rows = {r["recipe"]: r for r in json.loads((tmp_path / "sts.json").read_text())["results"]}
    row = rows["power_mean"]
    pairs = read_sts_pairs(sample)
    gold = [g for g, _, _ in pairs]
    unique = list(dict.fromkeys(t for _, a, b in pairs for t in (a, b)))
    vec = dict(zip(unique, by_hand(installed.power_mean,
                                   minilm_st.encode(unique, output_value="token_embeddings")),
                   strict=True))  # fmt: skip
    cos = [unit(vec[a]) @ unit(vec[b]) for _, a, b in pairs]
    assert row["spearman"] == pytest.approx(spearmanr(cos, gold).statistic, abs=1e-6)
    lo, hi = row["ci"]["spearman"]
    assert lo <= row["spearman"] <= hi and row["difference"]["metric"] == "spearman"
    # The row's printed command, in a fresh process that finds the plugin by its entry point.
    assert row["embed_command"] == "poolkit embed INPUT -o vectors.npy --recipe power_mean"
    (tmp_path / "in.txt").write_text("\n".join(unique[:20]) + "\n", encoding="utf-8")
    args = row["embed_command"].split()[1:]
    args[args.index("INPUT")] = "in.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), *sys.path])}
    done = subprocess.run(command(*args), cwd=tmp_path, env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    np.testing.assert_allclose(np.load(tmp_path / "vectors.npy"),
                               np.stack([unit(vec[t]) for t in unique[:20]]), atol=1e-6)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["power_mean", "first_last+mean/128"])
def test_exported_folder_loads_in_sentence_transformers_with_embeds_vectors(
    recipe, installed, plugin_dir, minilm_dir, tmp_path
):
    """The exported folder pools with poolkit's module (sentence-transformers' Pooling has
    no user poolings); ``SentenceTransformer(folder, trust_remote_code=True)`` (sentence-
    transformers asks it for any module class of another package) in a fresh process that finds the
    plugin by its entry point gives ``poolkit.embed``'s vectors (Normalize and /DIMS
    included)."""
    folder = pk.export(minilm_dir, tmp_path / "st", recipe=recipe)
    modules = json.loads((folder / "modules.json").read_text())
    assert modules[1]["type"] == "poolkit.deploy.st_module.RecipePooling"
    assert (
        json.loads((folder / "1_Pooling" / "config.json").read_text())["recipe"]
        == (recipe.split("/")[0])
    )
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert f'SentenceTransformer("{folder}", trust_remote_code=True)' in card
    want = pk.embed(TEXTS, minilm_dir, recipe)
    script = ("import sys, numpy as np; from sentence_transformers import SentenceTransformer; "
              "model = SentenceTransformer(sys.argv[1], trust_remote_code=True); "
              "np.save(sys.argv[2], model.encode(sys.argv[3:]))")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), *sys.path])}
    done = subprocess.run([sys.executable, "-c", script, str(folder), str(tmp_path / "st.npy"),
                           *TEXTS], env=env, capture_output=True)  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()
    got = np.load(tmp_path / "st.npy")
    assert got.shape == want.shape == (len(TEXTS), 128 if "/128" in recipe else 384)
    np.testing.assert_allclose(got, want, atol=1e-6)


@pytest.mark.slow
def test_onnx_export_carries_a_traceable_pooling_and_refuses_one_that_is_not(
    installed, minilm_dir, tmp_path
):
    """``first_last`` (tensor operations) exports to an ONNX graph that agrees with
    ``poolkit.embed`` (the export's own check, left and right padding); ``numpy_max`` (NumPy:
    its trace fixes the batch) is refused as an ExportError naming it, nothing written."""
    from poolkit.errors import ExportError

    folder = pk.export(minilm_dir, tmp_path / "ok", recipe="first_last", format="onnx")
    record = json.loads((folder / "poolkit-export.json").read_text())
    assert record["agreement"]["fp32"]["max_abs_diff"] <= 1e-4
    with pytest.raises(ExportError, match="numpy_max") as caught:
        pk.export(minilm_dir, tmp_path / "no", recipe="numpy_max", format="onnx")
    assert "Nothing was written" in str(caught.value)
    assert not (tmp_path / "no").exists()


@pytest.mark.slow
def test_onnx_export_of_a_pooling_traced_with_its_batch_fixed_is_one_error(
    registered, minilm_dir, tmp_path
):
    """``range(len(h))`` fixes the traced batch size: onnxruntime fails on the check batches
    of other sizes; the export says so naming the pooling (not the runtime's error)."""
    from poolkit.errors import ExportError

    def fixed_batch(h, mask):
        return h[range(len(h)), mask.sum(1) - 1]

    pk.register_pooling("fixed_batch", fixed_batch)
    registered.append("fixed_batch")
    with pytest.raises(ExportError, match="The pooling 'fixed_batch' does not trace to ONNX"):
        pk.export(minilm_dir, tmp_path / "no", recipe="fixed_batch", format="onnx")
    assert not (tmp_path / "no").exists()
