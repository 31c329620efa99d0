"""The token-state cache (poolkit.state_cache over poolkit.token_store, docs/cache.md):
a warm run gives the cold run's bits at every level and family, every part of the key
misses when it changes, damaged shards are recomputed, and the store keeps its bound.

The reference is the same call with no cache: the cache must be invisible in the numbers.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from equality import assert_same_bits
from testdata import sts_sentences

import poolkit
from poolkit.encoder import Encoder
from poolkit.io.integrity import IntegrityWarning
from poolkit.state_cache import StateCache, open_state_cache
from poolkit.token_store import MAGIC, TokenStore, parse_size, store_usage

TEXTS = sts_sentences()[:24]


@contextlib.contextmanager
def using(encoder: Encoder, cache: StateCache) -> Iterator[StateCache]:
    """``encoder`` with ``cache`` as its token-state cache, for the ``with`` block."""
    encoder.state_cache = cache
    try:
        yield cache
    finally:
        encoder.state_cache = None


def _dense(x: Any) -> np.ndarray:
    if isinstance(x, list):
        return np.concatenate(x)
    return x.toarray() if hasattr(x, "toarray") else np.asarray(x)


def _runs(encoder: Encoder, cache: StateCache, call: Any) -> tuple[Any, Any, Any]:
    """``call()`` without the cache, then twice with it (filling it, reading it)."""
    assert encoder.state_cache is None
    plain = call()
    with using(encoder, cache):
        cold = call()
        warm = call()
    return plain, cold, warm


@pytest.fixture
def minilm_cached(minilm, tmp_path):
    yield minilm, open_state_cache(tmp_path / "c")
    minilm.state_cache = None


@pytest.mark.parametrize(
    "recipe", ["mean", "cls+max@last4", "mean/128", "max_no_special", "mean@-2"]
)
def test_a_warm_run_gives_the_cold_runs_bits(minilm_cached, recipe):
    encoder, cache = minilm_cached
    texts = [*TEXTS, TEXTS[0], TEXTS[3]]  # repeats: each read as it was encoded
    plain, cold, warm = _runs(encoder, cache, lambda: poolkit.embed(texts, encoder, recipe))
    assert_same_bits(cold, plain, recipe)
    assert_same_bits(warm, plain, recipe)
    assert cache.counts.texts_encoded == len(texts) and cache.counts.texts_read == len(texts)


def test_a_text_in_two_batches_of_other_shapes_reads_each_as_encoded(minilm_cached):
    # A text that is both a query and a document is padded into batches of other shapes,
    # whose kernels may round its states differently: each batch reads its own (the bug
    # compare's fitted rows found on the retrieval fixture, where 8 documents are queries).
    encoder, cache = minilm_cached
    long = [f"{t} {t} {t}" for t in TEXTS[:12]]
    queries = [*TEXTS[:6]]
    documents = [*long, TEXTS[2], TEXTS[4], *TEXTS[12:20]]
    plain = [poolkit.embed(x, encoder, "mean") for x in (queries, documents)]
    with using(encoder, cache):
        cold = [poolkit.embed(x, encoder, "mean") for x in (queries, documents)]
        warm = [poolkit.embed(x, encoder, "mean") for x in (queries, documents)]
    for p, c, w in zip(plain, cold, warm, strict=True):
        assert_same_bits(c, p, "cold")
        assert_same_bits(w, p, "warm")
    assert cache.counts.texts_read == len(queries) + len(documents)


def test_words_spans_tokens_and_long_texts_read_back_exactly(minilm_cached):
    encoder, cache = minilm_cached
    long = [" ".join(TEXTS) * 2, *TEXTS[:4]]  # past 256 tokens: windows stitched
    words = [t.split() for t in TEXTS[:6]]
    calls = {
        "window": lambda: poolkit.embed(long, encoder, "mean", long_text="window"),
        "truncate": lambda: poolkit.embed(long, encoder, "mean"),
        "words": lambda: np.concatenate(poolkit.embed_words(words, encoder, "mean")),
        "tokens": lambda: np.concatenate(
            [np.asarray(t.vectors) for t in poolkit.embed_tokens(TEXTS[:6], encoder)]
        ),
        "spans": lambda: poolkit.embed_spans(
            TEXTS[:3], [[(0, 4)], [(2, 9)], [(1, 3)]], encoder, "endpoints"
        ),
    }
    for what, call in calls.items():  # each with a cache of its own: these share texts
        cache = open_state_cache(cache.store.root / what)
        plain, cold, warm = _runs(encoder, cache, call)
        assert_same_bits(_dense(cold), _dense(plain), what)
        assert_same_bits(_dense(warm), _dense(plain), what)


def test_every_layer_kept_serves_a_later_layer_mix_without_encoding(minilm, tmp_path):
    cache = open_state_cache(tmp_path, layers="all")
    with using(minilm, cache):
        poolkit.embed(TEXTS, minilm, "mean")  # every layer computed and kept
        encoded = cache.counts.texts_encoded
        mixed = poolkit.embed(TEXTS, minilm, "cls+max@last4")
        last = poolkit.embed(TEXTS, minilm, "mean")
    assert cache.counts.texts_encoded == encoded == len(TEXTS)
    assert_same_bits(mixed, poolkit.embed(TEXTS, minilm, "cls+max@last4"))
    assert_same_bits(last, poolkit.embed(TEXTS, minilm, "mean"))


def test_sparse_and_multivector_models_read_back_exactly(tiny_family_models, tmp_path):
    from poolkit.embedding import get_encoder

    for name, recipe in (("mlm", "splade_sum/top8"), ("multivector", "multivector:tokens")):
        model = tiny_family_models[name]
        encoder = get_encoder(model)
        cache = open_state_cache(tmp_path / name)
        plain, cold, warm = _runs(encoder, cache, lambda e=encoder, r=recipe: poolkit.embed(
            TEXTS, model=e, recipe=r))  # fmt: skip
        assert_same_bits(_dense(cold), _dense(plain), name)
        assert_same_bits(_dense(warm), _dense(plain), name)
        assert cache.counts.texts_read == len(TEXTS), name


@pytest.fixture(scope="module")
def tiny_family_models(tmp_path_factory) -> dict[str, str]:
    from tiny_models import build_mlm, build_multivector

    root = tmp_path_factory.mktemp("tiny_cache_models")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"mlm": str(build_mlm("bert_dense", root / "mlm")),
                "multivector": str(build_multivector("bert_dense", root / "mv"))}  # fmt: skip


def test_texts_partly_stored_give_the_uncached_bits(minilm, tmp_path):
    root = tmp_path / "c"
    assert _encoded(minilm, open_state_cache(root), TEXTS, max_batch_tokens=128) == len(TEXTS)
    shards = _shards(root)
    for shard in shards[::2]:  # as a killed run or an eviction leaves it: whole batches gone
        shard.unlink()
    cache = open_state_cache(root)
    with using(minilm, cache):
        got = poolkit.embed(TEXTS, minilm, "mean", max_batch_tokens=128)
    assert_same_bits(got, poolkit.embed(TEXTS, minilm, "mean", max_batch_tokens=128))
    assert 0 < cache.counts.texts_read < len(TEXTS)
    assert cache.counts.texts_read + cache.counts.texts_encoded == len(TEXTS)
    # A batch holding one text not stored is encoded whole (the uncached bits), its stored
    # texts encoded again but not written twice.
    with using(minilm, open_state_cache(root)) as cache:
        poolkit.embed([TEXTS[0], "a text never seen"], minilm, "mean")
    assert cache.counts.texts_encoded == 2


# -- every part of the key -------------------------------------------------------------


def _encoded(encoder: Encoder, cache: StateCache, texts: list[str], **kwargs: Any) -> int:
    before = cache.counts.texts_encoded
    with using(encoder, cache):
        poolkit.embed(texts, encoder, **kwargs)
    return cache.counts.texts_encoded - before


@pytest.mark.slow  # loads the model again for each part
def test_each_part_of_the_key_misses_when_it_changes(minilm, minilm_dir, tmp_path):
    import shutil

    cache = open_state_cache(tmp_path / "c")
    texts = TEXTS[:8]
    assert _encoded(minilm, cache, texts) == 8
    assert _encoded(minilm, cache, texts) == 0  # the same: all read
    assert _encoded(minilm, cache, texts, prompt="query: ") == 8  # the prompt (a route)
    assert _encoded(minilm, cache, texts, recipe="cls+mean@first_last") == 8  # other layers
    assert _encoded(minilm, cache, [t + "!" for t in texts]) == 8  # the text
    shorter = Encoder(minilm_dir, device="cpu", max_length=128)  # the max length
    assert _encoded(shorter, cache, texts) == 8
    windowed = _encoded(minilm, cache, texts, long_text="window")  # the long-text policy
    assert windowed == 8
    bf16 = Encoder(minilm_dir, device="cpu", dtype="bfloat16")  # the dtype
    assert _encoded(bf16, cache, texts) == 8
    bf16_again = Encoder(minilm_dir, device="cpu", dtype="bfloat16")
    with using(bf16_again, cache):
        got = poolkit.embed(texts, bf16_again, "mean")
    assert_same_bits(got, poolkit.embed(texts, bf16_again, "mean"), "bfloat16 read back")
    # The model's content, not its name: one byte of the config changed under one path.
    copy = tmp_path / "model"
    shutil.copytree(minilm_dir, copy)
    assert _encoded(Encoder(copy, device="cpu"), cache, texts) == 0  # same files: a hit
    config = copy / "config.json"
    config.write_text(config.read_text() + " ")
    assert _encoded(Encoder(copy, device="cpu"), cache, texts) == 8


@pytest.mark.slow  # loads the model again for each part
def test_the_backend_is_part_of_the_key(minilm, minilm_dir, tmp_path):
    class Wrapped:  # another runtime giving the same numbers: still another key
        def __init__(self, inner: Any) -> None:
            self.inner, self.device = inner, inner.device

        def forward(self, inputs: Any, *, all_layers: bool = False) -> Any:
            return self.inner.forward(inputs, all_layers=all_layers)

    cache = open_state_cache(tmp_path / "c")
    assert _encoded(minilm, cache, TEXTS[:5]) == 5
    other = Encoder(minilm_dir, device="cpu", backend=Wrapped(minilm.backend))
    assert _encoded(other, cache, TEXTS[:5]) == 5
    assert _encoded(other, cache, TEXTS[:5]) == 0


# -- damage, bounds, the store itself ---------------------------------------------------


def _shards(root: Path) -> list[Path]:
    return sorted(root.glob("states/v1/*/*.pks"))


@pytest.mark.parametrize("damage", ["flip", "truncate", "header"])
def test_a_damaged_shard_is_recomputed_with_one_warning(minilm, tmp_path, damage):
    root = tmp_path / "c"
    want = poolkit.embed(TEXTS, minilm, "mean")
    assert _encoded(minilm, open_state_cache(root), TEXTS) == len(TEXTS)
    shard = _shards(root)[0]
    data = bytearray(shard.read_bytes())
    if damage == "flip":
        data[-100] ^= 0x01
    elif damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(MAGIC) + 9] ^= 0xFF  # inside the JSON header
    shard.write_bytes(bytes(data))
    cache = open_state_cache(root)
    with using(minilm, cache):
        with pytest.warns(IntegrityWarning, match="damaged token-state cache shard"):
            got = poolkit.embed(TEXTS, minilm, "mean")
    assert_same_bits(got, want)
    assert cache.counts.texts_encoded > 0 and not shard.exists()


def test_a_killed_writers_leftovers_are_never_read(minilm, tmp_path):
    root = tmp_path / "c"
    assert _encoded(minilm, open_state_cache(root), TEXTS) == len(TEXTS)
    shard = _shards(root)[0]
    # What a writer killed mid-write leaves: a temporary file beside the shards.
    (shard.parent / f".{shard.name}.x.tmp").write_bytes(shard.read_bytes()[:1000])
    cache = open_state_cache(root)
    with using(minilm, cache):
        got = poolkit.embed(TEXTS, minilm, "mean")
    assert_same_bits(got, poolkit.embed(TEXTS, minilm, "mean"))
    assert cache.counts.texts_encoded == 0


def test_the_store_never_exceeds_its_bound_by_more_than_one_shard(minilm, tmp_path):
    root = tmp_path / "c"
    bound = 600_000  # about a third of what these texts write
    cache = open_state_cache(root, max_size=bound)
    with using(minilm, cache):
        got = poolkit.embed(TEXTS * 2, minilm, "mean", max_batch_tokens=256)
    sizes = [p.stat().st_size for p in _shards(root)]
    assert sum(sizes) <= bound + max(sizes)
    assert_same_bits(got, poolkit.embed(TEXTS * 2, minilm, "mean", max_batch_tokens=256))
    assert store_usage(root).bytes == sum(sizes)


def test_the_store_round_trips_evicts_least_recently_used_first_and_clears(tmp_path):
    from poolkit.token_store import clear_store

    store = TokenStore(tmp_path, max_bytes=None)
    store.open("ns")
    rng = np.random.default_rng(0)
    items = {f"k{i}": rng.standard_normal((i + 1, 4)).astype(np.float32) for i in range(3)}
    store.put("ns", dict(list(items.items())[:2]), seconds=[0.5, 0.25])
    store.put("ns", dict(list(items.items())[2:]))
    again = TokenStore(tmp_path)
    again.open("ns")
    got = again.get("ns", list(items))
    assert got is not None
    for a, b in zip(got, items.values(), strict=True):
        np.testing.assert_array_equal(a, b)
    assert again.seconds_of("ns", "k0") == 0.5 and again.get("ns", ["nope"]) is None
    first, second = _shards(tmp_path)  # names sort by write time
    os.utime(second, (1, 1))  # the second is now the least recently used
    size = first.stat().st_size
    again.evict(size)
    assert first.exists() and not second.exists()
    assert clear_store(tmp_path) == size
    assert store_usage(tmp_path).shards == 0


@pytest.mark.parametrize(("text", "want"), [("500M", 500 * 2**20), ("20G", 20 * 2**30),
                                            ("1.5GiB", int(1.5 * 2**30)), ("1024", 1024),
                                            ("2kb", 2048)])  # fmt: skip
def test_sizes_parse(text, want):
    assert parse_size(text) == want


@pytest.mark.parametrize("bad", ["", "-1G", "lots", "1X", "infG"])
def test_a_bad_size_is_refused_naming_the_flag(bad):
    with pytest.raises(ValueError, match="--cache-size"):
        parse_size(bad)


def test_the_cache_flags_are_checked(tmp_path):
    with pytest.raises(ValueError, match="cache_layers"):
        StateCache(TokenStore(tmp_path), layers="some")
    with pytest.raises(ValueError, match="cache_dtype"):
        StateCache(TokenStore(tmp_path), dtype="int8")


def test_many_shards_read_with_few_held_open(minilm, tmp_path, monkeypatch):
    import poolkit.token_store as token_store

    monkeypatch.setattr(token_store, "_OPEN_MAPS", 1)  # each map holds a file descriptor
    root = tmp_path / "c"
    assert _encoded(minilm, open_state_cache(root), TEXTS, max_batch_tokens=128) == len(TEXTS)
    assert len(_shards(root)) >= 3
    cache = open_state_cache(root)
    with using(minilm, cache):
        got = poolkit.embed(TEXTS, minilm, "mean", max_batch_tokens=128)
    assert cache.counts.texts_read == len(TEXTS) and len(cache.store._maps) == 1
    assert_same_bits(got, poolkit.embed(TEXTS, minilm, "mean", max_batch_tokens=128))
