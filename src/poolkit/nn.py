"""``torch.nn.Module`` twins of the functional core, for use inside models.

Each module calls the same function as the functional API (one implementation), adding
only what must be learned: an attention scorer or a width embedding.

    >>> import torch
    >>> from poolkit.nn import SpanExtractor
    >>> ext = SpanExtractor(8, "endpoints,attention", width_embedding_dim=4)
    >>> ext(torch.randn(2, 5, 8), torch.tensor([[[0, 1]], [[2, 4]]])).shape
    torch.Size([2, 1, 28])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from poolkit.sequence import parse_sequence_strategy, sequence_embedding
from poolkit.spans import (
    bucket_widths,
    num_width_buckets,
    parse_span_strategy,
    span_embeddings,
    span_output_dim,
)
from poolkit.words import WORD_STRATEGIES, word_embeddings


class Pooler(nn.Module):
    """Sequence pooling: ``(B, L, H)`` + mask ``(B, L)`` -> ``(B, D)``; see ``sequence_embedding``."""

    def __init__(self, strategy: str | Sequence[str] = "mean", *, exclude_special: bool = False):
        super().__init__()
        self.strategy = parse_sequence_strategy(strategy)
        self.exclude_special = exclude_special

    def output_dim(self, hidden_size: int) -> int:
        return hidden_size * len(self.strategy)

    def forward(
        self,
        hidden: torch.Tensor,
        mask: torch.Tensor | None = None,
        special_tokens_mask: Any = None,
    ) -> torch.Tensor:
        return sequence_embedding(
            hidden,
            mask,
            self.strategy,
            special_tokens_mask=special_tokens_mask,
            exclude_special=self.exclude_special,
        )

    def extra_repr(self) -> str:
        return f"strategy={'+'.join(self.strategy)!r}, exclude_special={self.exclude_special}"


class AttentionPooler(nn.Module):
    """Learned-query attention over each text's real tokens: ``(B, L, H)`` -> ``(B, H)``.

    One logit per token from ``Linear(H, 1)``, softmax over the row's real tokens only
    (padding gets no weight), weighted sum. Rows must have at least one real token.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        self.scorer = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, length, _ = hidden.shape
        scores = self.scorer(hidden).squeeze(-1)
        if mask is None:
            mask = torch.ones(b, length, dtype=torch.bool, device=hidden.device)
        real = mask.bool()
        if not bool(real.any(dim=1).all()):
            row = int((~real.any(dim=1)).nonzero()[0])
            raise ValueError(
                f"Row {row} of `mask` has no real token (all padding): nothing to attend to."
            )
        # each row is one span from its first to its last real token; holes get no weight
        scores = torch.where(real, scores, torch.finfo(scores.dtype).min)
        positions = torch.arange(length, device=hidden.device)
        first = torch.where(real, positions, length).amin(dim=1)
        last = torch.where(real, positions, -1).amax(dim=1)
        spans = torch.stack([first, last], dim=-1)[:, None, :]
        return span_embeddings(hidden, spans, "attention", scores=scores)[:, 0]


class WordPooler(nn.Module):
    """Sub-token vectors to word vectors: ``(B, L, H)`` + word ids ``(B, L)`` -> ``(B, W, D)``."""

    def __init__(self, strategy: str = "first"):
        super().__init__()
        if strategy not in WORD_STRATEGIES:
            raise ValueError(
                f"Expected `strategy` to be one of {', '.join(WORD_STRATEGIES)}, but got {strategy!r}."
            )
        self.strategy = strategy

    def output_dim(self, hidden_size: int) -> int:
        return hidden_size * (2 if self.strategy == "first_last" else 1)

    def forward(
        self, hidden: torch.Tensor, word_ids: Any, num_words: int | None = None
    ) -> torch.Tensor:
        return word_embeddings(hidden, word_ids, self.strategy, num_words=num_words)

    def extra_repr(self) -> str:
        return f"strategy={self.strategy!r}"


class SpanExtractor(nn.Module):
    """Span representations with learned parts: ``(B, L, H)`` + spans ``(B, S, 2)`` -> ``(B, S, D)``.

    Spans are inclusive ``[start, end]``; ``[-1, -1]`` or ``span_mask`` marks padded spans,
    which come out as zeros. ``attention`` terms use a learned ``Linear(H, 1)`` scorer
    (Lee et al. 2017). ``width_embedding_dim`` appends a learned embedding of the span's
    width bucket (``width_buckets``, default log buckets). ``D = output_dim``.
    """

    def __init__(
        self,
        hidden_size: int,
        strategy: str | Sequence[str] = "endpoints",
        *,
        width_embedding_dim: int | None = None,
        width_buckets: Any = "log",
    ):
        super().__init__()
        self.hidden_size = hidden_size
        self.strategy = parse_span_strategy(strategy)
        self.scorer = nn.Linear(hidden_size, 1) if "attention" in self.strategy else None
        self.width_buckets = width_buckets
        self.width_embedding = (
            nn.Embedding(num_width_buckets(width_buckets), width_embedding_dim)
            if width_embedding_dim
            else None
        )

    @property
    def output_dim(self) -> int:
        width = self.width_embedding.embedding_dim if self.width_embedding is not None else 0
        return span_output_dim(self.hidden_size, self.strategy) + width

    def forward(
        self,
        hidden: torch.Tensor,
        spans: torch.Tensor,
        mask: torch.Tensor | None = None,
        span_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        scores = self.scorer(hidden).squeeze(-1) if self.scorer is not None else None
        out = span_embeddings(
            hidden, spans, self.strategy, mask=mask, span_mask=span_mask, scores=scores
        )
        if self.width_embedding is None:
            return out
        padded = (spans < 0).all(dim=-1)
        if span_mask is not None:
            padded = padded | ~span_mask.bool()
        widths = (spans[..., 1] - spans[..., 0] + 1).clamp(min=1)
        buckets = torch.as_tensor(bucket_widths(widths, self.width_buckets), device=hidden.device)
        width = self.width_embedding(buckets) * (~padded)[..., None].to(out.dtype)
        return torch.cat([out, width.to(out.dtype)], dim=-1)

    def extra_repr(self) -> str:
        return f"hidden_size={self.hidden_size}, strategy={','.join(self.strategy)!r}"
