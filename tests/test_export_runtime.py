"""An exported ONNX folder runs with bare ``onnxruntime`` + ``tokenizers``: no poolkit, no torch.

A fresh virtualenv (one per test session, in tmp) gets only ``onnxruntime``, ``tokenizers``
and ``numpy`` from the package index (about 15 s); the README's deployment snippet runs
there on exported folders and must give ``poolkit.embed``'s vectors to 1e-5 on right- and
left-padded batches, one text and many.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import poolkit as pk

pytestmark = pytest.mark.slow

# The README's snippet, with the folder, the texts and the padding side as arguments.
SCRIPT = """\
import json, sys
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

folder, texts, side = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3]
tokenizer = Tokenizer.from_file(f"{folder}/tokenizer.json")  # truncation and padding set
tokenizer.enable_padding(direction=side, pad_id=tokenizer.padding["pad_id"],
                         pad_token=tokenizer.padding["pad_token"])
session = ort.InferenceSession(f"{folder}/model.onnx")
names = {i.name for i in session.get_inputs()}

def embed(batch):
    enc = tokenizer.encode_batch(batch)
    feed = {"input_ids": [e.ids for e in enc], "attention_mask": [e.attention_mask for e in enc],
            "token_type_ids": [e.type_ids for e in enc]}
    feed = {k: np.array(v, dtype=np.int64) for k, v in feed.items() if k in names}
    return session.run(["sentence_embedding"], feed)[0]

many = embed(texts)
one = np.concatenate([embed([t]) for t in texts])
np.save(sys.argv[4], np.stack([many, one]))
for name in ("poolkit", "torch", "transformers"):
    try:
        __import__(name)
    except ImportError:
        continue
    raise SystemExit(f"{name} is importable in the bare environment")
"""


@pytest.fixture(scope="session")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv holding onnxruntime, tokenizers and numpy only."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    r = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "onnxruntime", "tokenizers", "numpy"],
        capture_output=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return python


@pytest.mark.parametrize(
    ("name", "recipe", "quantize"),
    [
        ("minilm", "mean_no_special@last4", None),
        ("tiny_cls", "cls+max", None),
        ("minilm", "mean", "int8"),
    ],
)
def test_bare_runtime_gives_embeds_vectors(
    name, recipe, quantize, bare_python, minilm_dir, tiny_dirs, sts_dev, tmp_path
):
    model = {"minilm": minilm_dir, "tiny_cls": tiny_dirs["bert_cls"]}[name]
    folder = tmp_path / "deploy"
    pk.export(model, folder, recipe=recipe, format="onnx", quantize=quantize)
    texts = [*sts_dev[:12], "hello", "a [SEP] inside", " ".join(["long text"] * 200)]
    (tmp_path / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
    (tmp_path / "run.py").write_text(SCRIPT, encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the long text is truncated on purpose
        want = pk.embed(texts, model=model, recipe=recipe)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    for side in ("right", "left"):
        out = tmp_path / f"{side}.npy"
        r = subprocess.run(
            [str(bare_python), "run.py", str(folder), "texts.json", side, str(out)],
            cwd=tmp_path,
            capture_output=True,
            timeout=300,
            env=env,
        )
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        many, one = np.load(out)
        if quantize is None:
            np.testing.assert_allclose(many, want, atol=1e-5, rtol=0)
            np.testing.assert_allclose(one, want, atol=1e-5, rtol=0)
        else:  # int8: close to fp32 (cosine), as recorded at export
            for got in (many, one):
                cos = (
                    (got * want).sum(-1)
                    / np.linalg.norm(got, axis=-1)
                    / np.linalg.norm(want, axis=-1)
                )
                assert cos.min() >= 0.97, cos.min()
