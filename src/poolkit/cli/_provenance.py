"""The provenance record ``poolkit embed`` writes beside every output (in a Parquet
file's metadata, else in the ``.poolkit.json`` beside a ``.npy``/``.jsonl``): which model
(and a hash of its files), which recipes, which input (and a hash of its bytes), how rows
were read (ids, kept fields, chunks), the library versions and the command (as it would
be rerun: the output named ``OUTPUT``, without ``--resume``, ``--overwrite``, ``--quiet``,
so that a resumed job's output is byte for byte an uninterrupted one's)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
from typing import Any

from poolkit._versions import installed_versions
from poolkit.io.integrity import file_digest

__all__ = ["model_sha256", "provenance", "rerun"]


def model_sha256(files: dict[str, str]) -> str:
    """One SHA-256 for a model folder: of its ``relative path -> SHA-256`` list
    (:func:`poolkit.io.checkpoint.model_fingerprint`), sorted."""
    return hashlib.sha256(json.dumps(sorted(files.items())).encode("utf-8")).hexdigest()


def provenance(
    args: argparse.Namespace,
    encoder: Any,
    recipes: dict[str, Any],
    settings: dict[str, Any],
    rows: dict[str, Any] | None,
) -> dict[str, Any]:
    """The record of one local ``poolkit embed`` job: ``settings`` is its manifest's
    (model files, prompt, pipeline, chunks); ``rows`` how ids and kept fields were read."""
    source = args.input
    stdin = source == "-"
    packages = ["torch", "transformers", "tokenizers", "numpy"]
    packages += {"onnx": ["onnxruntime"], "openvino": ["openvino"]}.get(args.backend, [])
    argv = getattr(args, "argv", None)
    return {
        "model": {
            "name": encoder.info.reference,
            "path": str(encoder.info.path),
            "sha256": model_sha256(settings.get("model_files", {})),
        },
        "recipes": {name: str(r) for name, r in recipes.items()},
        "prompt": settings.get("prompt"),
        "pipeline": settings.get("pipeline"),
        "max_length": encoder.max_length,
        "backend": args.backend,
        "input": {
            "path": "<stdin>" if stdin else os.path.abspath(source),
            "sha256": None if stdin else file_digest(source),
            "text_column": args.text_column,
            "documents": getattr(args, "documents_read_as", None),
        },
        "rows": rows or {"id": "the row number (0-based) of each text in the input"},
        "chunks": settings.get("chunks"),
        "long_text": args.long_text,
        "versions": installed_versions(*packages),
        "command": None if argv is None else shlex.join(["poolkit", *rerun(argv)]),
    }


# Flags that change nothing in the vectors: left out of the recorded command, so that a
# resumed job (`--resume`) writes the bytes an uninterrupted one does.
_NOT_RECORDED = ("--resume", "--overwrite", "--quiet", "-q", "--debug")


def rerun(argv: list[str]) -> list[str]:
    """The command line that writes these vectors again: ``argv`` without the flags that
    change nothing in them, the output named ``OUTPUT`` (the record is in or beside it)."""
    out: list[str] = []
    after_o = False
    for arg in argv:
        if after_o:
            out.append("OUTPUT")
            after_o = False
        elif arg in ("-o", "--output"):
            out.append(arg)
            after_o = True
        elif arg.startswith("--output="):
            out.append("--output=OUTPUT")
        elif arg not in _NOT_RECORDED:
            out.append(arg)
    return out
