"""The sparse family's plan: sparse recipes resolved once for an encoder (the prompt, the
side, the MLM head checked), run by :func:`~poolkit.sparse.embed.embed_sparse`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from poolkit.families import FloatOutputs, float_only, register_family
from poolkit.prompts import check_pipeline, resolve_prompt, side_of
from poolkit.sparse.csr import canonical_csr
from poolkit.sparse.embed import embed_sparse, mlm_head
from poolkit.sparse.files import parquet_columns, sparse_record

__all__ = ["SparsePlan", "plan_sparse"]


@dataclass(frozen=True)
class SparsePlan(FloatOutputs):
    """Sparse recipes resolved for one encoder (see :func:`plan_sparse`).

    Attributes:
        recipes: name -> sparse :class:`~poolkit.Recipe`.
        prompt: the prompt text put before every text (``None``: none).
        side: ``"query"`` or ``"document"``: an inference-free model's queries take its
            static weights (no forward pass).
    """

    family: ClassVar[str] = "sparse"
    recipes: Mapping[str, Any]
    prompt: str | None
    side: str

    def columns(
        self, vectors: Mapping[str, Any], widths: Mapping[str, int]
    ) -> list[tuple[str, Any]]:
        """Each output as two Parquet list columns, ``<name>_indices`` ``list<int32>`` and
        ``<name>_values`` ``list<float32>`` (:func:`~poolkit.sparse.files.parquet_columns`)."""
        return [
            c for name in self.recipes for c in parquet_columns(name, canonical_csr(vectors[name]))
        ]

    def record(self, widths: Mapping[str, int]) -> dict[str, Any]:
        """Each column's recipe and vocabulary width (:func:`~poolkit.sparse.files.sparse_record`)."""
        return sparse_record(self.recipes, widths)

    def run(
        self,
        encoder: Any,
        texts: Sequence[str],
        *,
        long_text: str = "truncate",
        max_batch_tokens: int | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> tuple[dict[str, Any], Any]:
        """``({name: scipy.sparse.csr_array (N, V)}, stats)`` of checked ``texts``."""
        return embed_sparse(texts, encoder, self.recipes, long_text=long_text,
                            max_batch_tokens=max_batch_tokens, progress=progress,
                            prompt=self.prompt, side=self.side)  # fmt: skip


def plan_sparse(
    encoder: Any,
    recipes: Mapping[str, Any],
    *,
    prompt_name: str | None = None,
    prompt: str | None = None,
    pipeline: str = "full",
    calibration: Mapping[str, Any] | None = None,
) -> SparsePlan:
    """Resolve sparse ``recipes`` on ``encoder``: the prompt, the side (``prompt_name``
    ``"query"``: the query route of a routed model), the model's MLM head loaded (a folder
    without one is refused, naming the recipe). There are no modules after SPLADE pooling,
    so ``pipeline`` is only checked; int8/uint8 ``calibration`` is refused."""
    check_pipeline(pipeline)
    float_only("sparse", calibration)
    text = resolve_prompt(encoder.info, prompt_name, prompt)
    mlm_head(encoder, str(next(iter(recipes.values()))))
    return SparsePlan(recipes, text, side_of(prompt_name))


register_family("sparse", plan_sparse)
