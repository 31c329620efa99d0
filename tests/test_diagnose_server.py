"""`poolkit diagnose --url` against a real local HTTP server (stdlib, in a thread on
127.0.0.1) answering text-embeddings-inference's /embed and OpenAI's /v1/embeddings shapes
with CLS vectors that sentence-transformers made for a mean model; and each way a server
can fail: one line, exit status 2."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from clitools import one_error_line, poolkit
from tiny_models import MAX_SEQ, build_family

TEXTS = [
    "John works at Google in London.",
    "A cat sat on the mat, and the dog barked at it.",
    "Pooling turns token vectors into one vector per text.",
    "The quick brown fox jumps over the lazy dog.",
    "hello",
]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory):
    return build_family("mpnet", tmp_path_factory.mktemp("srv") / "mpnet")  # trained: mean


@pytest.fixture(scope="module")
def cls_vectors(model) -> dict[str, list[float]]:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Transformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling

    st = SentenceTransformer(modules=[Transformer(str(model), max_seq_length=MAX_SEQ),
                                      Pooling(32, pooling_mode="cls"), Normalize()],
                             device="cpu")  # fmt: skip
    return {t: v.tolist() for t, v in zip(TEXTS, st.encode(TEXTS), strict=True)}


@pytest.fixture
def server(cls_vectors):
    """A server whose behaviour the test sets: ``state["mode"]``; ``state["seen"]``: the
    headers of each request."""
    state: dict = {"mode": "ok", "seen": []}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state["seen"].append(dict(self.headers))
            texts = body.get("inputs") or body.get("input")
            rows = [cls_vectors[t] for t in texts]
            mode = state["mode"]
            if mode == "500":
                return self._send(500, {"error": "model crashed"})
            if mode == "shape":
                answer = {"embeddings": rows}
            elif mode == "count":
                answer = rows[:-1]
            elif self.path.endswith("/v1/embeddings"):
                answer = {"data": [{"embedding": r, "index": i} for i, r in enumerate(rows)][::-1]}
            else:
                answer = rows
            self._send(200, answer)

        def _send(self, code, obj):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state["url"] = f"http://127.0.0.1:{httpd.server_address[1]}"
    yield state
    httpd.shutdown()
    httpd.server_close()


def run(model, tmp_path, *args):
    (tmp_path / "texts.txt").write_text("\n".join(TEXTS) + "\n")
    return poolkit("diagnose", "texts.txt", "--model", str(model), *args, cwd=tmp_path)


@pytest.mark.parametrize("route", ["/embed", "/v1/embeddings"])
def test_cls_vectors_of_a_mean_model_from_a_server_are_diagnosed(model, server, tmp_path, route):
    r = run(model, tmp_path, "--url", server["url"] + route, "--json",
            "--header", "Authorization: Bearer s3cret")  # fmt: skip
    assert r.returncode == 0, r.stderr.decode()
    report = json.loads(r.stdout)
    assert report["best"]["recipe"] == "cls/l2" and report["best"]["matched"] == len(TEXTS)
    assert report["verdict"].startswith("MISMATCH: these are CLS vectors; the model was "
                                        "trained with mean"), report["verdict"]  # fmt: skip
    assert all(h.get("Authorization") == "Bearer s3cret" for h in server["seen"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["texts.txt"]  # nothing written


def test_server_failures_are_one_line_and_exit_2(model, server, tmp_path):
    url = server["url"] + "/embed"
    server["mode"] = "500"
    one_error_line(run(model, tmp_path, "--url", url), 2, "HTTP 500", "model crashed",
                   "after 3 tries")  # fmt: skip
    assert len(server["seen"]) == 3  # two retries
    server["mode"] = "shape"
    one_error_line(run(model, tmp_path, "--url", url), 2, "TEI's /embed answer", "dict")
    server["mode"] = "count"
    one_error_line(run(model, tmp_path, "--url", url), 2, "5 vectors", "it gave 4")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    one_error_line(run(model, tmp_path, "--url", f"http://127.0.0.1:{port}/embed",
                       "--retries", "0"), 2, "to answer", "ConnectError")  # fmt: skip


def test_the_vectors_the_server_gives_are_what_the_test_made(cls_vectors):
    # the fixture's reference: unit-norm CLS vectors, distinct per text
    arr = np.asarray(list(cls_vectors.values()))
    np.testing.assert_allclose(np.linalg.norm(arr, axis=1), 1, atol=1e-5)
    assert len({tuple(np.round(r, 5)) for r in arr}) == len(TEXTS)
