"""The tokenizer poolkit runs: a Rust ``tokenizers.Tokenizer`` and the few facts it needs.

Importing ``transformers`` (and ``torch``) costs seconds, the bulk of a short ``poolkit
embed --backend onnx`` run, so the Encoder calls :class:`TextTokenizer`, which holds only
the ``tokenizers`` pipeline.

That pipeline must be the one ``transformers.AutoTokenizer`` builds (as the model's own
pipeline does), which is not simply ``tokenizer.json``: transformers rebuilds a
model-specific class from the vocabulary and ``tokenizer_config.json`` flags, adds missing
special tokens, rewrites the template for ``add_bos_token``/``add_eos_token``, converts
slow-only folders. Rather than copy those rules, :func:`load_tokenizer` asks transformers
once and keeps the pipeline and the facts in ``<cache>/tokenizers/<key>.json``
(:func:`tokenizer_cache_key`); later loads need ``tokenizers`` alone (a few ms). The record
carries the SHA-256 of its content; a damaged one is rebuilt with an
:class:`~poolkit.io.integrity.IntegrityWarning`.
"""

from __future__ import annotations

import contextlib
import json
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from poolkit._cache import cache_root
from poolkit._versions import installed
from poolkit.errors import InputError

__all__ = ["TextTokenizer", "load_tokenizer", "tokenizer_cache_key"]

# Bump when the record's layout or the facts read from transformers change.
_FORMAT = 1

# Files AutoTokenizer may read in a model folder (config.json names the class when
# tokenizer_config.json does not). Weights are never among them.
_FILES = (
    "config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
    "added_tokens.json", "vocab.txt", "vocab.json", "merges.txt", "tekken.json",
    "chat_template.jinja",
)  # fmt: skip
_SUFFIXES = (".model", ".tiktoken")  # sentencepiece / tiktoken vocabularies


@dataclass(frozen=True)
class TextTokenizer:
    """A model's tokenizer as poolkit uses it: no truncation, no padding, no transformers.

    Attributes:
        backend_tokenizer: the ``tokenizers.Tokenizer`` pipeline transformers built.
        kind: e.g. ``"fast BertTokenizer (WordPiece)"``, for ``poolkit inspect``.
        padding_side: ``"right"`` or ``"left"`` (the tokenizer's own side).
        model_max_length: the tokenizer's length limit (huge when it states none).
        model_input_names: e.g. ``("input_ids", "token_type_ids", "attention_mask")``.
        pad_token_id / eos_token_id / unk_token_id: ids, ``None`` where the model has none.
        all_special_ids: ids of the named and extra special tokens.
    """

    backend_tokenizer: Any
    kind: str
    padding_side: str
    model_max_length: int | None
    model_input_names: tuple[str, ...]
    pad_token_id: int | None
    eos_token_id: int | None
    unk_token_id: int | None
    all_special_ids: tuple[int, ...]

    def encode(self, text: str, *, special_tokens: bool = True) -> Any:
        """One ``tokenizers.Encoding`` of ``text`` (ids, offsets, word ids), untruncated."""
        return self.backend_tokenizer.encode(text, add_special_tokens=special_tokens)

    def encode_batch(
        self, texts: Sequence[Any], *, special_tokens: bool = False, words: bool = False
    ) -> list[Any]:
        """``tokenizers.Encoding`` per text (``words=True``: per list of words), in parallel."""
        return self.backend_tokenizer.encode_batch(
            list(texts), add_special_tokens=special_tokens, is_pretokenized=words
        )

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> Any:
        """Token string of an id, or list of them for a sequence (as transformers does)."""
        if isinstance(ids, int):
            return self.backend_tokenizer.id_to_token(ids)
        return [self.backend_tokenizer.id_to_token(int(i)) for i in ids]

    def facts(self) -> dict[str, Any]:
        """Every field but the pipeline, and ``encode_special_tokens``, as JSON-ready values."""
        facts = {f.name: getattr(self, f.name) for f in fields(self)[1:]}
        return {
            **facts,
            "encode_special_tokens": bool(self.backend_tokenizer.encode_special_tokens),
        }

    @classmethod
    def from_record(cls, pipeline: str, facts: dict[str, Any]) -> TextTokenizer:
        """The tokenizer saved as ``pipeline`` (tokenizer.json text) and :meth:`facts`."""
        from tokenizers import Tokenizer

        backend = Tokenizer.from_str(pipeline)
        backend.no_truncation()
        backend.no_padding()
        # Not part of tokenizer.json: transformers sets it from split_special_tokens.
        backend.encode_special_tokens = bool(facts["encode_special_tokens"])
        got = {f.name: facts[f.name] for f in fields(cls)[1:]}
        limit = got["model_max_length"]
        got["model_max_length"] = int(limit) if isinstance(limit, int) else None
        got["kind"], got["padding_side"] = str(got["kind"]), str(got["padding_side"])
        got["model_input_names"] = tuple(got["model_input_names"])
        got["all_special_ids"] = tuple(int(i) for i in got["all_special_ids"])
        return cls(backend, **got)

    @classmethod
    def from_transformers(cls, tokenizer: Any) -> TextTokenizer:
        """Copy what poolkit needs from a loaded ``transformers`` fast tokenizer."""
        backend = tokenizer.backend_tokenizer
        facts = {f.name: getattr(tokenizer, f.name, None) for f in fields(cls)[1:]}
        facts["kind"] = f"fast {type(tokenizer).__name__} ({type(backend.model).__name__})"
        limit = facts["model_max_length"]
        facts["model_max_length"] = limit if isinstance(limit, int) and limit < 2**62 else None
        facts["encode_special_tokens"] = backend.encode_special_tokens
        return cls.from_record(backend.to_str(), facts)


def tokenizer_cache_key(path: str | os.PathLike[str]) -> str:
    """Hash of the tokenizer files of model folder ``path`` and of the library versions:
    any change to what AutoTokenizer would build gives a new key."""
    import hashlib

    import tokenizers

    root = Path(path)
    h = hashlib.sha256()
    h.update(f"{_FORMAT} {installed('transformers') or 'absent'} {tokenizers.__version__}".encode())
    names = set(_FILES)
    with contextlib.suppress(OSError):
        names |= {p.name for p in root.iterdir() if p.suffix in _SUFFIXES}
    for name in sorted(names):
        try:
            data = (root / name).read_bytes()
        except OSError:
            continue
        h.update(f"\0{name}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _read_record(file: Path) -> TextTokenizer | None:
    """The tokenizer in ``file``; None if absent, or damaged (then removed, one warning)."""
    from poolkit.io.integrity import IntegrityWarning, bytes_digest

    try:
        raw = file.read_bytes()
    except OSError:
        return None
    try:
        head, _, body = raw.partition(b"\n")
        record = json.loads(body)
        if json.loads(head)["sha256"] != bytes_digest(body):
            raise InputError(expected="the cached tokenizer's digest", got="it differs")
        return TextTokenizer.from_record(record["pipeline"], record["facts"])
    except Exception:
        warnings.warn(
            f"{file}: damaged tokenizer cache file (its content does not match the hash "
            "recorded when it was written); loading the tokenizer again with transformers.",
            IntegrityWarning,
            stacklevel=4,
        )
        with contextlib.suppress(OSError):
            file.unlink()
        return None


def _write_record(file: Path, tokenizer: TextTokenizer) -> None:
    """Save ``tokenizer`` atomically; a cache that cannot be written only costs speed."""
    from poolkit.io.atomic import atomic_write
    from poolkit.io.integrity import bytes_digest

    body = json.dumps(
        {"pipeline": tokenizer.backend_tokenizer.to_str(), "facts": tokenizer.facts()}
    ).encode()
    head = json.dumps({"sha256": bytes_digest(body)}).encode()
    with contextlib.suppress(OSError):
        file.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(file, lambda f: f.write(head + b"\n" + body))


def load_tokenizer(path: str | os.PathLike[str]) -> TextTokenizer:
    """The tokenizer of model folder ``path``: from the cache, else built by transformers
    (:func:`poolkit.model_folder.load_transformers_tokenizer`) and cached.

    Raises:
        ValueError: the folder has no tokenizer, or only a slow one that transformers
            cannot convert (offsets and word ids need a fast one).
    """
    file = cache_root() / "tokenizers" / f"{tokenizer_cache_key(path)}.json"
    cached = _read_record(file)
    if cached is not None:
        return cached
    from poolkit.model_folder import load_transformers_tokenizer

    tokenizer = TextTokenizer.from_transformers(load_transformers_tokenizer(path))
    _write_record(file, tokenizer)
    return tokenizer
