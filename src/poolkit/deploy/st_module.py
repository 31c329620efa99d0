"""A sentence-transformers module that pools by a poolkit recipe (:class:`RecipePooling`):
what an exported folder holds where sentence-transformers' ``Pooling`` cannot express the
recipe, a user's own pooling (:mod:`poolkit.poolings`). Loading such a folder needs poolkit,
the package that installs the pooling (its ``poolkit.poolings`` entry point), and
``SentenceTransformer(folder, trust_remote_code=True)``: sentence-transformers asks for it
before it imports a module class of another package."""

from __future__ import annotations

from typing import Any, ClassVar

from sentence_transformers.base.modules import Module

from poolkit.nn import Pooler

__all__ = ["MODULE_TYPE", "RecipePooling"]

MODULE_TYPE = f"{__name__}.RecipePooling"  # as modules.json names it


class RecipePooling(Module):
    """``token_embeddings`` ``(B, L, H)`` and ``attention_mask`` -> ``sentence_embedding``
    ``(B, D)`` by :class:`poolkit.nn.Pooler` (``recipe``: a sequence recipe without layers,
    ``_no_special`` or output stage), as :func:`poolkit.embed` pools."""

    config_keys: ClassVar[list[str]] = ["recipe", "word_embedding_dimension"]

    def __init__(self, recipe: str, word_embedding_dimension: int) -> None:
        super().__init__()
        self.recipe = recipe
        self.word_embedding_dimension = word_embedding_dimension
        self.pooler = Pooler(recipe)

    def forward(self, features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        features["sentence_embedding"] = self.pooler(
            features["token_embeddings"], features["attention_mask"]
        )
        return features

    def get_sentence_embedding_dimension(self) -> int:
        return self.pooler.output_dim(self.word_embedding_dimension)

    def save(
        self, output_path: str, *args: Any, safe_serialization: bool = True, **kwargs: Any
    ) -> None:
        self.save_config(output_path)
