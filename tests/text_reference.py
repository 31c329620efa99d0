"""Plain Hugging Face references for text-level tests: one text at a time, no batching,
no poolkit code. Used by test_embed_fuzz.py and test_unusual_text.py."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
import torch


class Reference:
    """all-MiniLM-L6-v2 through ``transformers`` directly, memoised per input."""

    def __init__(self, model_dir: Path, max_length: int = 256) -> None:
        from transformers import AutoModel, AutoTokenizer

        self.tok = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModel.from_pretrained(model_dir).eval()
        self.max_length = max_length
        self.encode = lru_cache(maxsize=4096)(self._encode)
        self.encode_words = lru_cache(maxsize=4096)(self._encode_words)

    def _run(self, enc) -> np.ndarray:
        with torch.inference_mode():
            out = self.model(
                input_ids=torch.tensor([enc["input_ids"]]),
                attention_mask=torch.tensor([enc["attention_mask"]]),
                token_type_ids=torch.zeros(1, len(enc["input_ids"]), dtype=torch.long),
            )
        return out.last_hidden_state[0].numpy().astype(np.float64)

    def _encode(self, text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """hidden ``(L, H)``, offsets ``(L, 2)``, special ``(L,)`` bool, tokens; specials kept."""
        enc = self.tok(text, truncation=True, max_length=self.max_length,
                       return_offsets_mapping=True, return_special_tokens_mask=True)  # fmt: skip
        special = np.asarray(enc["special_tokens_mask"], bool)
        tokens = self.tok.convert_ids_to_tokens(enc["input_ids"])
        return self._run(enc), np.asarray(enc["offset_mapping"]), special, tokens

    def _encode_words(self, words: tuple[str, ...]) -> tuple[np.ndarray, list[int | None]]:
        enc = self.tok(list(words), is_split_into_words=True, truncation=True,
                       max_length=self.max_length)  # fmt: skip
        return self._run(enc), enc.word_ids()

    def sentence(self, text: str) -> np.ndarray:
        """Mean over every token (specials included), L2-normalised: the model's pooling."""
        v = self.encode(text)[0].mean(axis=0)
        return v / max(np.linalg.norm(v), 1e-12)

    def tokens(self, text: str) -> tuple[list[str], np.ndarray, np.ndarray]:
        """Non-special tokens, their offsets and vectors."""
        hidden, offsets, special, tokens = self.encode(text)
        keep = ~special
        return [t for t, k in zip(tokens, keep, strict=True) if k], offsets[keep], hidden[keep]

    def words_first(self, words: tuple[str, ...]) -> np.ndarray:
        """Each word's first sub-token vector; zeros for a word with no sub-token."""
        hidden, word_ids = self.encode_words(words)
        out = np.zeros((len(words), hidden.shape[1]))
        seen: set[int] = set()
        for position, w in enumerate(word_ids):
            if w is not None and w not in seen:
                seen.add(w)
                out[w] = hidden[position]
        return out

    def span_tokens(self, text: str, start: int, end: int) -> tuple[int, int] | None:
        """First and last token (positions with [CLS] = 0) overlapping ``text[start:end]``."""
        _, offsets, special, _ = self.encode(text)
        hit = [
            p
            for p, (a, b) in enumerate(offsets)
            if not special[p] and b > a and a < end and b > start
        ]
        return (hit[0], hit[-1]) if hit else None

    def endpoints(self, text: str, start: int, end: int) -> np.ndarray | None:
        found = self.span_tokens(text, start, end)
        if found is None:
            return None
        hidden = self.encode(text)[0]
        return np.concatenate([hidden[found[0]], hidden[found[1]]])
