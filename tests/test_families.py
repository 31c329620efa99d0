"""Model families against their own pipeline: ``poolkit.embed`` == ``SentenceTransformer.encode``.

One tiny random model folder per family (tests/tiny_models.py: 2 layers, hidden 32, a
tokenizer trained here in the family's style, pipeline modules saved by
sentence-transformers itself). The reference is ``SentenceTransformer(dir).encode`` in
float32 on the CPU; agreement means max abs diff <= 1e-5. Texts include truncation
(``max_seq_length`` 24), leading/trailing/multiple spaces, emoji and CJK.
"""

from __future__ import annotations

import logging
import shutil
import warnings

import numpy as np
import pytest
from tiny_models import FAMILIES, build_family

from poolkit import Encoder, PipelineError, embed
from poolkit.driver import TruncationWarning

TEXTS = [
    "hello world",
    "  leading and trailing  ",
    "multiple   spaces   here",
    "東京は日本の首都です。 北京欢迎你",
    "Emoji 🙂 and 🚀 in text",
    "The quick brown fox jumps over the lazy dog. " * 4,  # past max_seq_length: truncated
    "a",
    "Pooling turns token vectors into one vector per text.",
]
TOL = 1e-5
# sentence-transformers pooling mode -> poolkit strategy
MODES = {"cls": "cls", "mean": "mean", "max": "max", "mean_sqrt_len_tokens": "mean_sqrt_len",
         "weightedmean": "weighted_mean", "lasttoken": "last"}  # fmt: skip


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("families")
    logging.disable(logging.WARNING)
    try:
        return {name: build_family(name, root / name) for name in FAMILIES}
    finally:
        logging.disable(logging.NOTSET)


@pytest.fixture(scope="module")
def loaded(family_dirs):
    """name -> (poolkit Encoder, SentenceTransformer) on the same folder, loaded once."""
    from sentence_transformers import SentenceTransformer

    cache = {}

    def get(name):
        if name not in cache:
            path = str(family_dirs[name])
            cache[name] = (Encoder(path, device="cpu"), SentenceTransformer(path, device="cpu"))
        return cache[name]

    return get


def _ours(enc, texts=TEXTS, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncationWarning)
        return embed(texts, model=enc, **kw)


def _theirs(st, texts=TEXTS, **kw):
    return st.encode(texts, batch_size=3, convert_to_numpy=True, **kw)


@pytest.mark.parametrize("name", FAMILIES)
def test_family_matches_its_pipeline(loaded, name):
    enc, st = loaded(name)
    # qwen3 puts its default prompt "Query: " first and keeps it out of pooling; "a" then
    # has no token left (poolkit refuses it: test_prompt_errors).
    texts = TEXTS if name != "qwen3" else [t for t in TEXTS if t != "a"]
    ours, theirs = _ours(enc, texts), _theirs(st, texts)
    assert ours.shape == theirs.shape == (len(texts), st.get_embedding_dimension())
    assert float(np.abs(ours - theirs).max()) <= TOL
    # Truncation happened, and the long text is cut the same way on both sides.
    _, stats = _ours(enc, texts, return_stats=True)
    assert 5 in stats.truncated


def _slow_but(names, fast):
    """``names`` as parameters, those not in ``fast`` marked slow (run with --slow)."""
    return [pytest.param(n, marks=() if n in fast else pytest.mark.slow) for n in names]


# Every family x every mode with --slow; the fast set keeps a diagonal, one mode per family,
# so that every family and every mode still runs.
EVERY_MODE = [
    pytest.param(name, mode, marks=() if i % len(MODES) == j else pytest.mark.slow)
    for i, name in enumerate(FAMILIES)
    for j, mode in enumerate(MODES)
]


@pytest.mark.parametrize(("name", "mode"), EVERY_MODE)
def test_family_every_pooling_mode(loaded, name, mode):
    enc, st = loaded(name)
    pooling = st[1]
    saved = pooling.pooling_mode
    pooling.pooling_mode = mode
    try:
        theirs = _theirs(st, prompt="")
    finally:
        pooling.pooling_mode = saved
    ours = _ours(enc, strategy=MODES[mode], prompt="")
    assert float(np.abs(ours - theirs).max()) <= TOL


def test_decoder_follows_the_tokenizer_on_eos(loaded):
    # qwen3's tokenizer appends nothing, qwen3_eos's appends <|endoftext|>: poolkit
    # follows each (the pipeline's default); append_eos=True appends on purpose.
    enc, _ = loaded("qwen3")
    eos = enc.tokenizer.eos_token_id
    (batch,) = list(enc.iter_batches(["hello world"]))
    assert batch.input_ids[0, -1] != eos
    enc_eos, _ = loaded("qwen3_eos")
    (batch,) = list(enc_eos.iter_batches(["hello world"]))
    assert batch.input_ids[0, -1] == enc_eos.tokenizer.eos_token_id
    forced = Encoder(enc.info.path, device="cpu", append_eos=True)
    (batch,) = list(forced.iter_batches(["hello world"]))
    assert batch.input_ids[0, -1] == eos
    assert batch.attention_mask[0, 0] == 1  # left padded, one row: no padding
    assert not np.allclose(_ours(forced, ["hello world"]), _ours(enc, ["hello world"]))


@pytest.mark.parametrize(
    ("name", "kw"),
    [
        ("bert_dense", {"prompt_name": "query"}),  # include_prompt false, [CLS] counted
        ("bert_dense", {"prompt": "custom instruction: "}),
        ("xlmr", {"prompt_name": "passage"}),  # include_prompt true
        ("qwen3", {}),  # default_prompt_name "query", include_prompt false, left padding
        ("qwen3", {"prompt_name": "document"}),  # an empty named prompt
        ("qwen3", {"prompt": ""}),  # the default turned off
        ("qwen3_eos", {"prompt_name": "query"}),
    ],
)
def test_prompts_as_the_pipeline_applies_them(loaded, name, kw):
    enc, st = loaded(name)
    texts = [t for t in TEXTS if t.strip() != "a"]
    assert float(np.abs(_ours(enc, texts, **kw) - _theirs(st, texts, **kw)).max()) <= TOL


@pytest.mark.parametrize("mode", ["cls", "mean", "max", "lasttoken"])
def test_prompt_excluded_from_every_pooling_mode(loaded, mode):
    enc, st = loaded("bert_dense")
    st[1].pooling_mode, saved = mode, st[1].pooling_mode
    try:
        theirs = _theirs(st, prompt_name="query")
    finally:
        st[1].pooling_mode = saved
    ours = _ours(enc, strategy=MODES[mode], prompt_name="query")
    assert float(np.abs(ours - theirs).max()) <= TOL


def test_prompt_length_counted_as_the_pipeline_counts(loaded):
    enc, st = loaded("bert_dense")
    # [CLS] query : [SEP] -> 3 tokens kept out of pooling ([SEP] is not the prompt's).
    assert enc.prompt_length("query: ") == len(st.tokenizer("query: ")["input_ids"]) - 1
    (batch,) = list(enc.iter_batches(["hello world"], prompt="query: "))
    excluded = (batch.attention_mask != 0) & (batch.pool_mask == 0)
    assert int(excluded.sum()) == enc.prompt_length("query: ") == 3
    assert batch.prompt_mask[0].tolist()[:4] == [False, True, True, False]


def test_prompt_errors(loaded):
    enc, _ = loaded("bert_dense")
    with pytest.raises(
        ValueError, match="one of the model's prompts \\('document', 'passage', 'query'\\)"
    ):
        embed(["x"], model=enc, prompt_name="qeury")
    with pytest.raises(ValueError) as e:
        embed(["x"], model=enc, prompt_name="query", prompt="q: ")
    assert str(e.value) == (
        "Expected `prompt` to be None when `prompt_name` is given, but got 'q: '. Pass one."
    )
    with pytest.raises(ValueError) as e:
        embed(["x"], model=enc, strategy="weighted_mean", prompt_name="query")
    assert str(e.value) == (
        "Expected `strategy` to be a pooling other than weighted_mean with a prompt that the "
        "model keeps out of pooling (include_prompt: false), but got weighted_mean: the model's "
        "pipeline counts positions from the prompt, poolkit from the text. Pass prompt='' or "
        "another strategy."
    )
    with pytest.raises(ValueError, match=r"Pass the prompt to tokenize\(\)"):
        next(enc.iter_batches(enc.tokenize(["x"]), prompt="query: "))
    qwen, _ = loaded("qwen3")
    # Nothing left after the prompt (truncation; or "a" merged with the prompt's trailing
    # space, which the pipeline counts as a prompt token): refused, not a zero vector.
    for texts, prompt in ((["word " * 40], "x " * 40), (["hello", "a"], None)):
        with pytest.raises(ValueError, match=r"^Expected `texts` to be texts that keep at least "
                           r"one token after the prompt, which the model keeps out of pooling "
                           r"\(include_prompt: false\), but got texts \d(, \d)* that keep none"):  # fmt: skip
            embed(texts, model=qwen, prompt=prompt)


def test_left_padded_bert_poolkit_equals_one_at_a_time(family_dirs, tmp_path):
    """A BERT whose tokenizer pads on the left: sentence-transformers feeds the padding
    into absolute positions, so its batched vectors depend on the batch; poolkit pads
    encoders on the right and equals the pipeline's one-text-at-a-time vectors."""
    import json

    from sentence_transformers import SentenceTransformer

    path = tmp_path / "bert_left"
    shutil.copytree(family_dirs["bert_dense"], path)
    cfg_path = path / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["padding_side"] = "left"
    cfg_path.write_text(json.dumps(cfg))
    st = SentenceTransformer(str(path), device="cpu")
    one = np.stack([st.encode([t])[0] for t in TEXTS])
    batched = st.encode(TEXTS, batch_size=len(TEXTS))
    ours = _ours(Encoder(path, device="cpu"))
    assert float(np.abs(ours - one).max()) <= TOL
    assert float(np.abs(batched - one).max()) > 1e-3  # the peer's batch dependence


def test_pooled_pipeline_is_the_pooling_output(loaded):
    from sentence_transformers import SentenceTransformer

    for name in ("bert_dense", "t5", "mpnet", "roberta"):
        enc, st = loaded(name)
        pooled_only = SentenceTransformer(modules=[st[0], st[1]], device="cpu")
        theirs = pooled_only.encode(TEXTS, batch_size=3, prompt="")
        ours = _ours(enc, pipeline="pooled", prompt="")
        assert ours.shape[1] == 32
        assert float(np.abs(ours - theirs).max()) <= TOL


def test_recipe_the_head_cannot_take_is_refused(loaded):
    enc, _ = loaded("bert_dense")
    with pytest.raises(
        PipelineError,
        match=r"32-d vectors, as the model's .*2_Dense.*'cls\+mean', which gives 64-d vectors",
    ):
        embed(["x"], model=enc, strategy="cls+mean")
    assert _ours(enc, ["x"], strategy="cls+mean", pipeline="pooled").shape == (1, 64)
    assert _ours(enc, ["x"], strategy="cls").shape == (1, 16)  # the width fits: applied
    assert embed([], model=enc).shape == (0, 16)
    with pytest.raises(ValueError, match="`pipeline` to be 'full'"):
        embed(["x"], model=enc, pipeline="head")


def test_unknown_module_is_refused_with_the_way_out(family_dirs, tmp_path):
    import json

    path = tmp_path / "with_lstm"
    shutil.copytree(family_dirs["xlmr"], path)
    modules = json.loads((path / "modules.json").read_text())
    modules.insert(1, {"idx": 9, "name": "9", "path": "9_LSTM",
                       "type": "sentence_transformers.sentence_transformer.modules.LSTM"})  # fmt: skip
    (path / "modules.json").write_text(json.dumps(modules))
    enc = Encoder(path, device="cpu")
    with pytest.raises(PipelineError, match=r"LSTM \(9_LSTM\).*`pipeline='pooled'`"):
        embed(["x"], model=enc)
    assert embed(["x"], model=enc, pipeline="pooled").shape == (1, 32)
    rows = dict(enc.info.describe())
    assert (
        rows["pipeline 2"].startswith("LSTM (9_LSTM): a recurrent layer")
        and "refused" in (rows["pipeline 2"])
    )


def test_inspect_rows_show_the_pipeline_and_prompts(loaded):
    enc, _ = loaded("bert_dense")
    rows = dict(enc.info.describe())
    assert rows["pipeline 2"] == "Pooling (1_Pooling): pooling mean, prompt tokens excluded [input]"
    assert rows["pipeline 3"] == "Dense (2_Dense): 32 -> 16, Tanh, bias [applied]"
    assert rows["pipeline 4"] == "Normalize (3_Normalize): L2 normalisation [applied]"
    assert rows["prompt query"] == "'query: '"
    assert rows["prompt tokens"].startswith("excluded from pooling")
    qwen, _ = loaded("qwen3")
    assert dict(qwen.info.describe())["prompt query (default)"] == "'Query: '"


ENCODER_FAMILIES = [n for n in FAMILIES if not n.startswith("qwen3")]


# fast: WordPiece, byte-level BPE and SentencePiece-style tokenizers; all with --slow
@pytest.mark.parametrize("name", _slow_but(ENCODER_FAMILIES, ("bert_dense", "roberta", "t5")))
def test_family_onnx_agrees_with_torch(loaded, family_dirs, name, tmp_path, monkeypatch):
    monkeypatch.setenv("POOLKIT_CACHE", str(tmp_path))
    enc, _ = loaded(name)
    onnx = Encoder(family_dirs[name], backend="onnx")
    assert float(np.abs(_ours(onnx) - _ours(enc)).max()) <= 1e-4


# The OpenVINO model is converted from the same ONNX export that the test above checks on
# every family; three unlike ones keep the suite short (all eight passed when it was added).
@pytest.mark.parametrize("name", _slow_but(["bert_dense", "modernbert", "t5"], ("bert_dense",)))
def test_family_openvino_agrees_with_torch(loaded, family_dirs, name, tmp_path, monkeypatch):
    pytest.importorskip("openvino")
    monkeypatch.setenv("POOLKIT_CACHE", str(tmp_path))
    enc, _ = loaded(name)
    ov = Encoder(family_dirs[name], backend="openvino")
    assert float(np.abs(_ours(ov) - _ours(enc)).max()) <= 1e-4


@pytest.mark.parametrize("backend", ["onnx", "openvino"])
@pytest.mark.parametrize("name", ["qwen3", "qwen3_eos"])
def test_left_padded_decoder_onnx_refused_before_export(
    family_dirs, name, backend, tmp_path, monkeypatch
):
    monkeypatch.setenv("POOLKIT_CACHE", str(tmp_path))
    with pytest.raises(ValueError, match=r"left-padded decoder.*backend='torch'") as info:
        Encoder(family_dirs[name], backend=backend)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "onnx").exists() and not (tmp_path / "openvino").exists()
