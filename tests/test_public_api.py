"""The curated public names: a change here is a change of the API."""

from __future__ import annotations

import subprocess
import sys

import poolkit

CORE = {
    "sequence_embedding",
    "token_embeddings",
    "flat_token_embeddings",
    "word_embeddings",
    "span_embeddings",
    "layer_mix",
    "SEQUENCE_STRATEGIES",
    "SPAN_STRATEGIES",
    "WORD_STRATEGIES",
}


def test_core_names_exported():
    assert CORE <= set(poolkit.__all__)
    for name in poolkit.__all__:
        assert hasattr(poolkit, name), name


def test_numpy_users_never_import_torch_for_the_core():
    code = (
        "import sys, numpy as np\n"
        "from poolkit.sequence import sequence_embedding\n"
        "from poolkit.spans import span_embeddings\n"
        "from poolkit.words import word_embeddings\n"
        "h = np.ones((2, 3, 4), np.float32)\n"
        "sequence_embedding(h, np.array([[1, 1, 0], [1, 1, 1]]), 'mean+max')\n"
        "span_embeddings(h, np.array([[[0, 1]], [[1, 2]]]), 'endpoints')\n"
        "word_embeddings(h, [[0, 0, 1], [0, 1, None]], 'mean')\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
