"""The vectors to diagnose: read from a file (:func:`read_vectors`), or asked of a deployment
for the user's texts (:func:`onnx_vectors`, :func:`folder_vectors`, :func:`server_vectors`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from poolkit._errors import missing_extra, value_error
from poolkit.errors import InputError, MissingDependencyError

__all__ = ["folder_vectors", "onnx_vectors", "read_vectors", "server_vectors"]

BATCH = 32  # texts per request or ONNX run (TEI's default client batch limit)


def read_vectors(path: str | os.PathLike[str], column: str | None = None) -> np.ndarray:
    """The ``(N, D)`` vectors in ``path`` (format from its extension), in file order."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file." if not p.exists()
                         else f"{p}: is a directory, not a vectors file.")  # fmt: skip
    ext = p.suffix.lower()
    if ext in (".npy", ".npz"):
        return _numpy(p)
    if ext in (".parquet", ".pq"):
        return _parquet(p, column)
    if ext in (".jsonl", ".ndjson", ".json"):
        return _json(p, column, lines=ext != ".json")
    raise InputError(arg="VECTORS", expected="a .npy, .npz, .parquet, .jsonl or .json file", got=repr(p.name))  # fmt: skip


def _numpy(p: Path) -> np.ndarray:
    try:
        data = np.load(p, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise InputError(where=str(p), expected="a NumPy file", got=f"it is not ({e})") from None
    if isinstance(data, np.lib.npyio.NpzFile):
        with data:
            names = list(data.files)
            if len(names) != 1:
                raise InputError(arg="VECTORS", expected="an .npz with one array", got=f"{names}")
            return np.asarray(data[names[0]])
    return np.asarray(data)


def _parquet(p: Path, column: str | None) -> np.ndarray:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(p)
    except (pa.ArrowInvalid, OSError) as e:
        raise InputError(where=str(p), expected="a Parquet file", got=f"it is not ({e})") from None
    lists = [f.name for f in schema if pa.types.is_list(f.type) or pa.types.is_fixed_size_list(
        f.type) or pa.types.is_large_list(f.type)]  # fmt: skip
    name = _pick(lists, column, p)
    col = pq.read_table(p, columns=[name]).column(name).combine_chunks()
    if col.null_count:
        raise InputError(where=str(p), expected=f"a vector in every row of column {name!r}",
                         got="some rows are empty")  # fmt: skip
    values = col.flatten().to_numpy(zero_copy_only=False)
    return _rows(values, len(col), p)


def _pick(names: list[str], column: str | None, p: Path) -> str:
    if column is not None:
        if column not in names:
            value_error("--column", f"a vector column of {p.name} ({', '.join(names) or 'none'})",
                        repr(column))  # fmt: skip
        return column
    if len(names) != 1:
        value_error("--column", f"given: {p.name} has {len(names)} vector columns "
                    f"({', '.join(names) or 'none'})", "none")  # fmt: skip
    return names[0]


def _rows(flat: np.ndarray, n: int, p: Path) -> np.ndarray:
    if n == 0 or flat.size % n:
        raise InputError(where=str(p), expected="vectors of one width",
                         got="different widths (or none)")  # fmt: skip
    return flat.reshape(n, flat.size // n)


def _json(p: Path, column: str | None, lines: bool) -> np.ndarray:
    rows: list[Any] = []
    with open(p, encoding="utf-8") as f:
        if lines:
            for number, line in enumerate(f, 1):
                if line.strip():
                    rows.append(_json_row(_loads(line, f"{p}: line {number}"), column,
                                          f"{p}: line {number}"))  # fmt: skip
        else:
            data = _loads(f.read(), str(p))
            if isinstance(data, Mapping) and isinstance(data.get("data"), list):
                data = [_openai_item(x, str(p)) for x in _by_index(data["data"])]
            if not isinstance(data, list):
                raise InputError(
                    arg="VECTORS", expected="a JSON list of vectors", got=type(data).__name__
                )
            rows = [_json_row(x, column, str(p)) for x in data]
    try:
        return np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(where=str(p), expected="vectors of numbers, of one width",
                         got="they are not") from None  # fmt: skip


def _loads(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(where=where, expected="JSON", got=f"it is not ({e.msg})") from None


def _json_row(item: Any, column: str | None, where: str) -> Any:
    if isinstance(item, list):
        return item
    if isinstance(item, Mapping):
        names = [k for k, v in item.items() if isinstance(v, list)]
        return item[_pick(names, column, Path(where))]
    raise InputError(where=where, expected="a list of numbers or an object holding one",
                         got=f"got {type(item).__name__}")  # fmt: skip


def _by_index(items: list[Any]) -> list[Any]:
    if all(isinstance(x, Mapping) and isinstance(x.get("index"), int) for x in items):
        return sorted(items, key=lambda x: x["index"])
    return items


def _openai_item(item: Any, where: str) -> Any:
    if not isinstance(item, Mapping) or not isinstance(item.get("embedding"), list):
        raise InputError(where=where, expected="data[...].embedding lists (OpenAI's shape)",
                         got="they are missing")  # fmt: skip
    return item["embedding"]


# ---------------------------------------------------------------------- deployments


def onnx_vectors(path: str | os.PathLike[str], texts: Sequence[str], encoder: Any) -> np.ndarray:
    """Vectors of an ONNX graph that pools inside (``(B, D)`` out) for ``texts``.

    Tokenized with ``tokenizer.json`` beside the graph when there is one (the deployment's
    truncation and template), else with the model's own tokenizer as ``poolkit export`` bakes
    it; batches of :data:`BATCH` texts, right-padded."""
    from poolkit.backends.onnx import OnnxRunner, runtime_tokenizer

    p = Path(path)
    if not p.is_file():
        raise InputError(arg="--onnx", expected="an ONNX file", got=f"{str(p)!r}, which "
                                  f"{'is a directory' if p.exists() else 'does not exist'}")  # fmt: skip
    try:
        import onnxruntime as ort
    except ImportError:
        raise MissingDependencyError(missing_extra("--onnx", "onnxruntime", "onnx")) from None
    try:
        session = ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own classes for a file it cannot load
        raise InputError(where=str(p), expected="an ONNX graph onnxruntime can load",
                         got=f"it is not ({e})") from None  # fmt: skip
    outputs = session.get_outputs()
    names = [o.name for o in outputs]
    name = "sentence_embedding" if "sentence_embedding" in names else names[0]
    rank = len(next(o for o in outputs if o.name == name).shape)
    if rank != 2:
        raise InputError(arg="--onnx", expected="a graph that gives one vector per text (B, D)", got=f"output {name!r} of rank {rank} (token vectors?)", fix="Its pooling happens outside the graph: diagnose the "
                                  "vectors the whole system writes instead.")  # fmt: skip
    beside = p.parent / "tokenizer.json"
    if beside.is_file():
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(beside))
    else:
        tokenizer = runtime_tokenizer(encoder)
    runner = OnnxRunner(p, output=name)
    parts = []
    for start in range(0, len(texts), BATCH):
        enc = tokenizer.encode_batch(list(texts[start : start + BATCH]))
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        types = np.array([e.type_ids for e in enc], dtype=np.int64)
        parts.append(runner(ids, mask, types))
    return np.concatenate(parts)


def folder_vectors(path: str | os.PathLike[str], texts: Sequence[str]) -> np.ndarray:
    """Vectors of a sentence-transformers folder, as ``SentenceTransformer(path).encode``
    gives them (on the CPU)."""
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise MissingDependencyError(
            missing_extra("a sentence-transformers folder", "sentence-transformers", "diagnose")
        ) from None
    model = SentenceTransformer(os.fspath(path), device="cpu")
    return np.asarray(model.encode(list(texts), batch_size=BATCH, convert_to_numpy=True))


def server_kind(url: str) -> str:
    """``"tei"`` for a URL ending in ``/embed``, ``"openai"`` for ``/embeddings``."""
    path = url.split("?", 1)[0].rstrip("/")
    if path.endswith("/embed"):
        return "tei"
    if path.endswith("/embeddings"):
        return "openai"
    value_error("--url", "a URL ending in /embed (text-embeddings-inference) or /v1/embeddings "
                "(OpenAI-compatible)", repr(url))  # fmt: skip


def server_vectors(
    url: str,
    texts: Sequence[str],
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 30.0,
    retries: int = 2,
    served_model: str | None = None,
) -> np.ndarray:
    """Ask the server at ``url`` for the vectors of ``texts``, :data:`BATCH` at a time.

    TEI's ``/embed`` gets ``{"inputs": [...], "truncate": true}`` and answers a list of
    vectors; ``/v1/embeddings`` gets ``{"input": [...], "model": served_model}`` and answers
    ``{"data": [{"embedding": [...], "index": i}]}``. A refused connection, a timeout, a 429
    or a 5xx is tried again ``retries`` times (0.2 s, then twice as long each time); then,
    or for any other answer than the expected one, one :class:`~poolkit.InputError` line."""
    try:
        import httpx
    except ImportError:
        raise MissingDependencyError(missing_extra("--url", "httpx", "diagnose")) from None
    kind = server_kind(url)
    out: list[np.ndarray] = []
    with httpx.Client(timeout=timeout, headers=dict(headers or {})) as client:
        for start in range(0, len(texts), BATCH):
            batch = list(texts[start : start + BATCH])
            body: dict[str, Any] = (
                {"inputs": batch, "truncate": True} if kind == "tei"
                else {"input": batch, "model": served_model or "default"}
            )  # fmt: skip
            answer = _post(client, url, body, retries, httpx)
            out.append(_answer_vectors(answer, kind, len(batch), url))
    return np.concatenate(out)


def _post(client: Any, url: str, body: dict[str, Any], retries: int, httpx: Any) -> Any:
    for attempt in range(retries + 1):
        last = attempt == retries
        try:
            response = client.post(url, json=body)
        except httpx.TransportError as e:
            if last:
                raise InputError(expected=f"the server at {url} to answer", got=f"{type(e).__name__}: {e or 'no answer'} (after "
                                       f"{retries + 1} tries)", fix="Check --url and that the server runs.") from None  # fmt: skip
        else:
            if response.status_code < 400:
                try:
                    return response.json()
                except ValueError:
                    raise InputError(expected=f"JSON from {url}", got=f"it answered {response.text[:60]!r}") from None  # fmt: skip
            if last or not (response.status_code == 429 or response.status_code >= 500):
                text = " ".join(response.text.split())[:120]
                raise InputError(expected=f"{url} to answer the texts", got=f"it answered HTTP {response.status_code}"
                                       + (f": {text}" if text else "")
                                       + (f" (after {retries + 1} tries)" if last and
                                          response.status_code >= 429 else ""), fix="Check --url, --header and the server's log.")  # fmt: skip
        time.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")


def _answer_vectors(answer: Any, kind: str, count: int, url: str) -> np.ndarray:
    if kind == "openai":
        data = answer.get("data") if isinstance(answer, Mapping) else None
        shape = 'an OpenAI embeddings answer {"data": [{"embedding": [...]}]}'
        if not isinstance(data, list) or not all(
            isinstance(x, Mapping) and isinstance(x.get("embedding"), list) for x in data
        ):
            raise InputError(expected=f"{url} to give {shape}", got=f"it gave {_glimpse(answer)}")
        rows = [x["embedding"] for x in _by_index(data)]
    else:
        rows = answer
        if not isinstance(rows, list) or not all(isinstance(x, list) for x in rows):
            raise InputError(expected=f"{url} to give TEI's /embed answer (a list of vectors)", got=f"it gave {_glimpse(answer)}")  # fmt: skip
    if len(rows) != count:
        raise InputError(expected=f"{count} vectors from {url}, one per text sent", got=f"it gave {len(rows)}")  # fmt: skip
    try:
        arr = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(expected=f"{url} to give vectors of numbers, all of one width", got=f"it gave {_glimpse(answer)}") from None  # fmt: skip
    if arr.ndim != 2:
        raise InputError(expected=f"{url} to give vectors of numbers, all of one width", got=f"it gave {_glimpse(answer)}")  # fmt: skip
    return arr


def _glimpse(value: Any) -> str:
    text = json.dumps(value)[:60]
    return f"{type(value).__name__} {text}"
