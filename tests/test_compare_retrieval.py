"""`compare --task retrieval`: reading (BEIR folder, simple table, every error), exact
top-k search, and the metrics against a hand-computed case and pytrec_eval (trec_eval)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from metric_reference import exact_unit_vectors

from poolkit.compare.datasets import DataError
from poolkit.compare.retrieval import query_metrics, read_retrieval
from poolkit.compare.search import id_order, top_k

FIXTURE = Path(__file__).parent / "data" / "stsb-images-retrieval"


def beir(tmp_path: Path, corpus, queries, qrels: str, split: str = "test") -> Path:
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (folder / "qrels" / f"{split}.tsv").write_text(qrels)
    return folder


CORPUS = [{"_id": "a", "title": "Title", "text": " body "}, {"_id": "b", "text": "plain"},
          {"_id": "c", "title": "", "text": "untitled"}]  # fmt: skip
QUERIES = [{"_id": "1", "text": "first"}, {"_id": "2", "text": "second"},
           {"_id": "3", "text": "unjudged"}]  # fmt: skip


def test_beir_folder_joins_title_as_mteb_and_keeps_judged_queries(tmp_path):
    folder = beir(
        tmp_path, CORPUS, QUERIES, "query-id\tcorpus-id\tscore\n2\tb\t1\n1\ta\t2\n1\tc\t0\n"
    )
    data = read_retrieval(folder)
    # MTEB: (title + " " + text).strip(); inner spaces stay.
    assert data.documents == ["Title  body", "plain", "untitled"]
    assert data.query_ids == ["1", "2"] and data.queries == ["first", "second"]
    assert data.qrels.tolist() == [[0, 0, 2], [0, 2, 0], [1, 1, 1]]


def test_simple_table_form(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text("question,answer\nq one,doc x\nq two,doc y\nq one,doc y\n")
    data = read_retrieval(path, query_column="question", document_column="answer")
    assert data.queries == ["q one", "q two"] and data.documents == ["doc x", "doc y"]
    assert data.qrels.tolist() == [[0, 0, 1], [0, 1, 1], [1, 1, 1]]


@pytest.mark.parametrize(
    ("corpus", "queries", "qrels", "message"),
    [
        (CORPUS, QUERIES, "1\tzz\t1\n", r"qrels/test.tsv:1: Expected a corpus-id of corpus.jsonl, but got 'zz'"),
        (CORPUS, QUERIES, "query-id\tcorpus-id\tscore\n9\ta\t1\n", r"qrels/test.tsv:2: Expected a query-id of queries.jsonl, but got '9'"),
        (CORPUS, QUERIES, "1\ta\t1\n1\ta\t2\n", r"qrels/test.tsv:2: Expected one judgement of \(1, a\), but it was first at .*test.tsv:1\."),
        (CORPUS, QUERIES, "1\ta\t0\n2\tb\t1\n", r"qrels/test.tsv:1: Expected query '1' to have a relevant document"),
        (CORPUS, QUERIES, "1\ta\n", r"qrels/test.tsv:1: Expected 3 tab-separated fields"),
        (CORPUS, QUERIES, "1\ta\thigh\n", r"qrels/test.tsv:1: Expected an integer score, but got 'high'"),
        ([*CORPUS, {"_id": "b", "text": "again"}], QUERIES, "1\ta\t1\n", r"corpus.jsonl:4: Expected _id 'b' once, but it was first at .*corpus.jsonl:2\."),
        (CORPUS, [*QUERIES, {"_id": "1", "text": "x"}], "1\ta\t1\n", r"queries.jsonl:4: Expected _id '1' once"),
        ([], QUERIES, "1\ta\t1\n", r"corpus.jsonl: Expected documents, but the corpus is empty"),
        ([{"_id": "a", "title": " ", "text": ""}], QUERIES, "1\ta\t1\n", r"corpus.jsonl:1: Expected a document with a title or text, but it is empty"),
        ([{"text": "no id"}], QUERIES, "1\ta\t1\n", r"corpus.jsonl:1: Expected an _id"),
        (CORPUS, QUERIES, "", r"qrels/test.tsv: Expected judgements, but none was found"),
    ],
)  # fmt: skip
def test_bad_beir_data_names_file_and_line(tmp_path, corpus, queries, qrels, message):
    with pytest.raises(DataError, match=message):
        read_retrieval(beir(tmp_path, corpus, queries, qrels))


def test_split_choice(tmp_path):
    folder = beir(tmp_path, CORPUS, QUERIES, "1\ta\t1\n", split="dev")
    assert read_retrieval(folder).queries == ["first"]  # the only qrels file
    (folder / "qrels" / "train.tsv").write_text("2\tb\t1\n")
    with pytest.raises(
        DataError,
        match=r"qrels: Expected qrels/test.tsv or a single qrels file, but found dev, train\. Choose one with `split`",
    ):
        read_retrieval(folder)
    assert read_retrieval(folder, split="train").queries == ["second"]
    with pytest.raises(
        DataError,
        match=r"Expected `split` to be a split of .*qrels, but got 'test'\. Its splits: dev, train\.",
    ):
        read_retrieval(folder, split="test")
    # No judgements at all: the files looked for and BEIR's layout, not a --split hint.
    for name in ("dev", "train"):
        (folder / "qrels" / f"{name}.tsv").unlink()
    for split in (None, "test"):
        with pytest.raises(DataError) as e:
            read_retrieval(folder, split=split)
        assert str(e.value) == (
            f"{folder / 'qrels'}: Expected judgements as qrels/SPLIT.tsv (BEIR's layout: "
            "corpus.jsonl, queries.jsonl, qrels/test.tsv with the columns query-id, "
            "corpus-id, score), but it holds no .tsv file. Add qrels/test.tsv."
        )
    (folder / "qrels").rmdir()
    with pytest.raises(DataError, match=r"but the folder does not exist\. Add qrels/test"):
        read_retrieval(folder)


def test_hand_computed_tiny_case():
    # One query; documents at 10, 20, 30, 40 degrees from it: ranking d1 > d2 > d3 > d4.
    angles = np.radians([10, 20, 30, 40])
    docs = np.stack([np.cos(angles), np.sin(angles)], axis=1) * [[3], [1], [2], [5]]
    ranked, scores = top_k(np.array([[2.0, 0.0]]), docs, 100)
    assert ranked.tolist() == [[0, 1, 2, 3]]
    np.testing.assert_allclose(scores[0], np.cos(angles), rtol=1e-6)
    qrels = np.array([[0, 1, 2], [0, 3, 1]])  # d2 relevance 2, d4 relevance 1
    ndcg, mrr, recall, ap = query_metrics(ranked, qrels, 4)[0]
    dcg = 2 / np.log2(3) + 1 / np.log2(5)
    ideal = 2 / np.log2(2) + 1 / np.log2(3)
    assert ndcg == pytest.approx(dcg / ideal, abs=1e-12)
    assert mrr == 0.5 and recall == 1.0
    assert ap == pytest.approx((1 / 2 + 2 / 4) / 2, abs=1e-12)


def test_metrics_match_pytrec_eval_with_ties_and_graded_judgements():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rng = np.random.default_rng(0)
    n_q, n_d = 40, 300
    # Cosines exact on every CPU (sums of +-0.25 terms): many ties, as in real corpora with
    # duplicates, and none of them left to the matmul's order of summation.
    queries = exact_unit_vectors(rng, n_q)
    docs = exact_unit_vectors(rng, n_d)
    docs[5], docs[100] = docs[7], 2 * docs[7]  # ties in cosine at any length
    ids = [f"doc{i}" for i in range(n_d)]
    qrels = {}
    for q in range(n_q):
        judged = {int(d): int(rng.integers(0, 3)) for d in rng.choice(n_d, 6, replace=False)}
        judged[7] = 2
        qrels[q] = judged
    rows = np.array(sorted((q, d, r) for q, j in qrels.items() for d, r in j.items()))
    # Small chunks: the running top-k must merge across many blocks exactly.
    ranked, _ = top_k(queries, docs, 100, id_order(ids), query_block=7, doc_block=50)
    ours = query_metrics(ranked, rows, n_d)

    unit_q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    unit_d = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    scores = unit_q @ unit_d.T
    run = {str(q): {ids[d]: float(scores[q, d]) for d in range(n_d)} for q in range(n_q)}
    judged = {str(q): {ids[d]: r for d, r in j.items()} for q, j in qrels.items()}
    measures = {"ndcg_cut.10", "recall.100", "map_cut.100"}
    ref = pytrec_eval.RelevanceEvaluator(judged, measures).evaluate(run)
    for q in range(n_q):
        r = ref[str(q)]
        np.testing.assert_allclose(
            ours[q, [0, 2, 3]], [r["ndcg_cut_10"], r["recall_100"], r["map_cut_100"]], atol=1e-12
        )
        # MRR@10 as MTEB computes it: the first relevant document among the top 10.
        # Score, then id, both descending: trec_eval's order of ties (strcmp on docno, so
        # doc10 before doc1).
        top = sorted(range(n_d), key=lambda d: (scores[q, d], ids[d]), reverse=True)[:10]
        first = next((k for k, d in enumerate(top) if qrels[q].get(d, 0) > 0), None)
        assert ours[q, 1] == pytest.approx(0.0 if first is None else 1 / (first + 1), abs=1e-12)


def test_fixture_is_valid_beir():
    data = read_retrieval(FIXTURE)
    assert len(data) == 129 and len(data.documents) == 481
    assert set(np.unique(data.qrels[:, 2])) == {1, 2}


def test_a_tie_at_the_cut_keeps_the_documents_trec_eval_ranks_first():
    """Many documents tie at the k-th score across blocks: the ones kept are those the
    tie rule (larger id first) ranks first, as a full sort of every score gives them."""
    rng = np.random.default_rng(1)
    docs = rng.normal(size=(300, 4)).astype(np.float32)
    docs[::3] = docs[0]  # 100 documents with one vector: a tie far wider than k
    queries = np.stack([docs[0], rng.normal(size=4).astype(np.float32)])
    ids = [f"d{(i * 7919) % 1000:03d}" for i in range(300)]  # id order unlike index order
    ranked, _ = top_k(queries, docs, 20, id_order(ids), query_block=1, doc_block=37)
    unit_q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    unit_d = docs / np.linalg.norm(docs, axis=1, keepdims=True)
    scores = (unit_q @ unit_d.T).astype(np.float32)
    order = id_order(ids)
    for q in range(2):
        assert ranked[q].tolist() == np.lexsort((-order, -scores[q]))[:20].tolist()


# --- read by poolkit's one record reader (read_records): a broken line named by file and line


@pytest.mark.parametrize(
    ("name", "content", "line", "problem"),
    [
        ("corpus.jsonl", b'{"_id": "a", "text": "x"}\n\n{"_id": "b", "text": \n', 3,
         "Expected valid JSON, but it is not (Expecting value)."),
        ("queries.jsonl", b'{"_id": "1", "text": "q"}\n["1", "q"]\n', 2,
         "Expected an object per line, but got a JSON list."),
        ("queries.jsonl", b'{"_id": "1", "text": "q"}\n{"_id": "2", "text": "caf\xe9"}\n', 2,
         "Expected UTF-8 text, but it is not valid UTF-8 (invalid continuation byte at byte 25). "
         "Convert the file to UTF-8."),
        ("qrels/test.tsv", b"query-id\tcorpus-id\tscore\n1\ta\t1\n1\tb\t1\t1\n", 3,
         "Expected at most 3 (query-id, corpus-id, score) fields, but got 4. Quote fields that "
         "contain '\\t'."),
        ("pairs.jsonl", b'{"query": "q", "document": "d"}\n{"query": "q2", "document": \n', 2,
         "Expected valid JSON, but it is not (Expecting value)."),
        ("pairs.csv", b"query,document\nq,d\nq2,d2,extra\n", 3,
         "Expected at most the header's 2 fields, but got 3. Quote fields that contain ','."),
        ("pairs.tsv", b"query\tdocument\nq\td\nq2\tnul\x00\n", 3,
         "Expected UTF-8 text, but it contains a NUL byte (binary, or UTF-16?). Convert it to "
         "UTF-8 text."),
    ],
)  # fmt: skip
def test_a_broken_line_is_named_by_file_and_line(tmp_path, name, content, line, problem):
    from poolkit.errors import InputError
    from poolkit.io.readers import read_records

    folder = beir(tmp_path, CORPUS, QUERIES, "1\ta\t1\n")
    path = tmp_path / name if name.startswith("pairs") else folder / name
    path.write_bytes(content)
    with pytest.raises(InputError) as info:
        read_retrieval(path if name.startswith("pairs") else folder)
    assert str(info.value) == f"{path}: line {line}: {problem}"
    # The shared reader's own message for the file, word for word.
    names = ["query-id", "corpus-id", "score"] if name.startswith("qrels") else None
    with pytest.raises(InputError) as shared:
        read_records(path, names=names)
    assert str(shared.value) == str(info.value)


def test_qrels_read_as_tsv_with_or_without_a_header(tmp_path):
    """The header line is optional and may follow blank lines; a BOM, CRLF line ends,
    blank and space-only lines and spaces around a field change nothing."""
    plain = read_retrieval(beir(tmp_path / "plain", CORPUS, QUERIES, "2\tb\t1\n1\ta\t2\n1\tc\t0\n"))
    assert plain.qrels.tolist() == [[0, 0, 2], [0, 2, 0], [1, 1, 1]]
    for k, qrels in enumerate([
        "\ufeffquery-id\tcorpus-id\tscore\r\n2\tb\t1\r\n\r\n1\ta\t2\r\n  \r\n1\tc\t0\r\n",
        "\n\nqid\tdid\tscore\n2\t b \t1\n1\ta\t 2\n1\tc\t0\n",
    ]):  # fmt: skip
        data = read_retrieval(beir(tmp_path / str(k), CORPUS, QUERIES, qrels))
        assert data.qrels.tolist() == plain.qrels.tolist()
        assert (data.query_ids, data.doc_ids) == (plain.query_ids, plain.doc_ids)


@pytest.mark.parametrize("form", ["beir", "pairs"])
def test_cli_names_the_broken_line(tmp_path, form):
    """`poolkit compare --task retrieval` on a broken file: one line naming file and line,
    exit status 2, before any model loads."""
    from clitools import one_error_line, poolkit

    folder = beir(tmp_path, CORPUS, QUERIES, "1\ta\t1\n")
    path = folder / "corpus.jsonl" if form == "beir" else tmp_path / "pairs.jsonl"
    path.write_text('{"_id": "a", "query": "q", "document": "d", "text": "x"}\n\n{"_id": \n')
    data = folder if form == "beir" else path
    result = poolkit("compare", "--task", "retrieval", str(data), cwd=tmp_path)
    one_error_line(result, 2, f"poolkit: error: {path}: line 3: Expected valid JSON, but it is "
                   "not (Expecting value).")  # fmt: skip
