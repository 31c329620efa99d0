"""The curated public names: a change here is a change of the API."""

from __future__ import annotations

import subprocess
import sys

import poolkit

# Every public name, pinned: adding, removing or renaming one fails here on purpose.
PUBLIC = [
    "Calibration", "Chunker", "Diagnosis", "DocumentChunks", "EmbedStats", "EncodedBatch", "Encoder", "ExportError", "InputError", "InputTypeError",
    "LAYER_PRESETS", "LOG_WIDTH_BUCKETS", "MissingDependencyError", "ModelInfo",
    "ModelNotFoundError", "OutputExistsError", "PRECISIONS", "PipelineError", "PoolkitError", "Recipe",
    "RecipeError", "RunError", "SEQUENCE_STRATEGIES", "SPAN_STRATEGIES",
    "TokenVectors", "TruncationWarning", "WORD_STRATEGIES", "bucket_widths", "diagnose", "embed",
    "embed_chunks", "embed_spans", "embed_tokens", "embed_words", "export", "fit", "flat_token_embeddings", "layer_mix",
    "maxsim", "model_info", "parse_sequence_strategy", "parse_span_strategy", "register_pooling",
    "sequence_embedding", "span_embeddings", "span_output_dim", "token_embeddings",
    "unregister_pooling", "word_embeddings", "word_spans",
]  # fmt: skip


def test_all_is_exactly_the_public_names():
    assert sorted(poolkit.__all__) == PUBLIC
    assert len(set(poolkit.__all__)) == len(poolkit.__all__)
    for name in poolkit.__all__:
        assert hasattr(poolkit, name), name
    # Nothing else public at the top level but the subpackages/modules and __version__.
    import types

    extra = {
        n for n, v in vars(poolkit).items()
        if not n.startswith("_") and n not in PUBLIC and not isinstance(v, types.ModuleType)
    }  # fmt: skip
    assert extra == set(), extra


def test_one_exception_family():
    import numpy as np

    from poolkit.compare.datasets import DataError
    from poolkit.io.checkpoint import CheckpointError
    from poolkit.io.diskfull import DiskFullError
    from poolkit.io.readers import InputError
    from poolkit.ray import RayNotInstalledError

    family = {
        poolkit.InputError: ValueError, poolkit.ModelNotFoundError: ValueError,
        poolkit.ExportError: RuntimeError, poolkit.MissingDependencyError: ImportError,
        poolkit.RecipeError: ValueError, InputError: ValueError, CheckpointError: ValueError,
        DataError: ValueError, RayNotInstalledError: ImportError,
        poolkit.InputTypeError: TypeError, poolkit.RunError: RuntimeError,
        poolkit.OutputExistsError: FileExistsError, DiskFullError: OSError,
    }  # fmt: skip
    for kind, builtin in family.items():
        assert issubclass(kind, poolkit.PoolkitError) and issubclass(kind, builtin), kind
    assert InputError is poolkit.InputError
    for kind in (poolkit.RecipeError, CheckpointError, DataError):
        assert issubclass(kind, poolkit.InputError), kind
    # Raised for real, through the argument checks most calls go through (value_error and
    # type_error): before the family covered them, these were plain ValueError/TypeError.
    for call, builtin in (
        (lambda: poolkit.embed(["a"], max_batch_tokens=0), ValueError),
        (lambda: poolkit.sequence_embedding(np.ones((1, 2, 3)), None, "avg"), ValueError),
        (lambda: poolkit.sequence_embedding("not an array"), TypeError),
    ):
        try:
            call()
        except Exception as e:  # the kind is what is checked
            assert isinstance(e, poolkit.PoolkitError) and isinstance(e, builtin), repr(e)
        else:
            raise AssertionError("no error")
    # A bad recipe name and a missing model.
    try:
        poolkit.Recipe.parse("meen")
    except poolkit.PoolkitError as e:
        assert type(e) is poolkit.RecipeError
    else:
        raise AssertionError("no error for an unknown recipe")
    try:
        poolkit.model_info("/nonexistent/poolkit-model")
    except poolkit.PoolkitError as e:
        assert type(e) is poolkit.ModelNotFoundError
    else:
        raise AssertionError("no error for a missing model")


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
