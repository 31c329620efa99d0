"""poolkit: sequence, token, word and span representations from transformer encoders."""

from poolkit import _errors as _errors  # registers the errors' one renderer
from poolkit._version import __version__ as __version__
from poolkit.chunkers import Chunker
from poolkit.chunking import DocumentChunks, embed_chunks
from poolkit.deploy import export
from poolkit.diagnosis import Diagnosis, diagnose
from poolkit.embedding import (
    EmbedStats,
    TokenVectors,
    TruncationWarning,
    embed,
    embed_spans,
    embed_tokens,
    embed_words,
    fit,
)
from poolkit.encoder import EncodedBatch, Encoder
from poolkit.errors import (
    ExportError,
    InputError,
    InputTypeError,
    MissingDependencyError,
    ModelNotFoundError,
    OutputExistsError,
    PipelineError,
    PoolkitError,
    RunError,
)
from poolkit.layers import LAYER_PRESETS, layer_mix
from poolkit.model_folder import ModelInfo, model_info
from poolkit.multivector import maxsim
from poolkit.output import PRECISIONS, Calibration
from poolkit.poolings import register_pooling, unregister_pooling
from poolkit.recipe import Recipe, RecipeError
from poolkit.sequence import SEQUENCE_STRATEGIES, parse_sequence_strategy, sequence_embedding
from poolkit.spans import (
    LOG_WIDTH_BUCKETS,
    SPAN_STRATEGIES,
    bucket_widths,
    parse_span_strategy,
    span_embeddings,
    span_output_dim,
)
from poolkit.tokens import flat_token_embeddings, token_embeddings
from poolkit.words import WORD_STRATEGIES, word_embeddings, word_spans

__all__ = [
    "LAYER_PRESETS",
    "LOG_WIDTH_BUCKETS",
    "PRECISIONS",
    "SEQUENCE_STRATEGIES",
    "SPAN_STRATEGIES",
    "WORD_STRATEGIES",
    "Calibration",
    "Chunker",
    "Diagnosis",
    "DocumentChunks",
    "EmbedStats",
    "EncodedBatch",
    "Encoder",
    "ExportError",
    "InputError",
    "InputTypeError",
    "MissingDependencyError",
    "ModelInfo",
    "ModelNotFoundError",
    "OutputExistsError",
    "PipelineError",
    "PoolkitError",
    "Recipe",
    "RecipeError",
    "RunError",
    "TokenVectors",
    "TruncationWarning",
    "bucket_widths",
    "diagnose",
    "embed",
    "embed_chunks",
    "embed_spans",
    "embed_tokens",
    "embed_words",
    "export",
    "fit",
    "flat_token_embeddings",
    "layer_mix",
    "maxsim",
    "model_info",
    "parse_sequence_strategy",
    "parse_span_strategy",
    "register_pooling",
    "sequence_embedding",
    "span_embeddings",
    "span_output_dim",
    "token_embeddings",
    "unregister_pooling",
    "word_embeddings",
    "word_spans",
]
