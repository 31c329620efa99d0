"""MUVERA against MaxSim on real token vectors: all-MiniLM-L6-v2 (a plain encoder: its last
hidden states, L2 per token) of the first 200 STS-B dev pairs, sentence 1 as the query and
sentence 2 as the document. At fastembed's default options the MUVERA dot product must rank
the pairs as MaxSim does (Spearman >= 0.8; measured 0.9555, docs/multivector.md)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import spearmanr
from testdata import full_data, read_sts_pairs

import poolkit
from poolkit.multivector import MUVERA_DEFAULTS, muvera_encode

PAIRS = 200


@pytest.mark.data
def test_muvera_ranks_pairs_like_maxsim():
    pairs = read_sts_pairs(full_data("stsb/sts-dev.csv"))[:PAIRS]
    q = poolkit.embed([a for _, a, _ in pairs], recipe="multivector:tokens/l2", prompt_name="query")
    d = poolkit.embed([b for _, _, b in pairs], recipe="multivector:tokens/l2")
    exact = np.array([poolkit.maxsim([x], [y])[0, 0] for x, y in zip(q, d, strict=True)])
    folded = np.array([
        muvera_encode(x, MUVERA_DEFAULTS, query=True) @ muvera_encode(y, MUVERA_DEFAULTS, query=False)
        for x, y in zip(q, d, strict=True)
    ])  # fmt: skip
    # The recipe gives the same encodings as the function (batched apart: float noise only).
    mq = poolkit.embed([pairs[0][1]], recipe="multivector:tokens/l2/muvera", prompt_name="query")
    np.testing.assert_allclose(mq[0], muvera_encode(q[0], MUVERA_DEFAULTS, query=True), atol=1e-5)
    rho = spearmanr(exact, folded).statistic
    print(f"MUVERA vs MaxSim, {PAIRS} STS-B dev pairs: Spearman {rho:.4f}")
    assert rho >= 0.8, rho
