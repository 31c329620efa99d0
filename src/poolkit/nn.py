"""``torch.nn.Module`` twins of the functional core, for use inside models.

Each module calls the same function as the functional API (one implementation), adding
only what must be learned: an attention scorer or a width embedding. Tensors that need
a gradient, live on an accelerator or are bfloat16 take the vectorised path: a fixed
number of tensor operations whatever the batch size, planned on the tensor's device.

Every module takes ``check``, which decides how the data-dependent checks (0/1 masks,
empty rows, span bounds, word-id adjacency, NaN/inf) run; shape and dtype are checked
from metadata in every mode, which costs nothing:

* ``True`` or ``"async"`` (default): the checks run on the tensors' device and are folded
  into one flag; a forward pass never waits for the host. On the CPU that flag is read at
  once (it is host memory already) and a failure raises the exact error; on an
  accelerator it goes to ``torch._assert_async``, so a bad batch fails at the next
  synchronisation with a message that names the checks (the device is unusable after a
  device-side assert, as after any). ``torch.compile(module, fullgraph=True)`` traces it.
* ``"full"``: the flags are read back once per forward pass (one host sync on an
  accelerator) and a failure raises the exact ``ValueError``/``TypeError`` naming the
  row, span or value, on every device. Use it to find what was wrong with a batch.
* ``False``: no data checks. Invalid input gives unspecified values (empty rows give
  zeros) instead of an error.

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

from poolkit._arrays import Checks, check_mode, device_mask
from poolkit._errors import value_error
from poolkit._legacy import legacy_recipe
from poolkit._plan import row_bounds
from poolkit.driver import LayerViews, l2_normalize, sequence_vectors
from poolkit.errors import InputError
from poolkit.output import truncate
from poolkit.recipe import Recipe
from poolkit.sequence import parse_sequence_strategy
from poolkit.spans import (
    bucket_width_tensor,
    num_width_buckets,
    parse_span_strategy,
    span_embeddings,
    span_output_dim,
    spans_dense,
)
from poolkit.words import word_embeddings, words_dense


class Pooler(nn.Module):
    """A sequence recipe as a module: ``(B, L, H)`` + mask ``(B, L)`` -> ``(B, D)``; a
    ``/DIMS`` recipe keeps the first ``DIMS`` (L2 again with ``/l2``), as
    ``embed(..., pipeline="pooled")`` does; ``/PRECISION`` is refused (no gradient).

    ``recipe``: a :class:`~poolkit.Recipe` or a name (a list of names: concatenated),
    default ``"mean"``; ``strategy`` and ``exclude_special`` are its deprecated spellings
    (:mod:`poolkit._legacy`). With layers, ``hidden`` is every layer's ``(B, L, H)``,
    embeddings first. Pooled as :func:`poolkit.embed` pools
    (:func:`poolkit.driver.sequence_vectors`), on ``hidden``'s device, dtype and graph.
    ``check``: see the module docstring.
    """

    def __init__(
        self,
        recipe: Recipe | str | Sequence[str] | None = None,
        *,
        check: bool | str = True,
        strategy: str | Sequence[str] | None = None,
        exclude_special: bool = False,
    ):
        super().__init__()
        if strategy is not None and not isinstance(strategy, str):
            strategy = "+".join(parse_sequence_strategy(strategy))
        legacy = {"strategy": strategy, "exclude_special": exclude_special}
        recipe = legacy_recipe("Pooler", "sequence", recipe, legacy, stacklevel=3)
        if recipe is not None and not isinstance(recipe, str | Recipe):
            recipe = "+".join(parse_sequence_strategy(recipe))  # a list: concatenated
        recipe = Recipe.parse(recipe or "mean")
        if recipe.level != "sequence" or recipe.precision is not None:
            # int8/binary codes have no gradient: quantise the module's output after training
            # (poolkit.output.quantize), as embed does.
            value_error("recipe", "a sequence recipe, /DIMS but no /PRECISION", repr(str(recipe)))
        self.recipe = recipe
        check_mode(check)
        self.check = check

    def output_dim(self, hidden_size: int) -> int:
        return self.recipe.output_dim(hidden_size)

    def forward(
        self,
        hidden: torch.Tensor | Sequence[torch.Tensor],
        mask: torch.Tensor | None = None,
        special_tokens_mask: Any = None,
    ) -> torch.Tensor:
        views = LayerViews.of(hidden, mask, special_tokens_mask)
        pooled = sequence_vectors(views, [self.recipe.pooling], check=self.check, host=False)
        # /DIMS as embed's "pooled" pipeline applies it: no model module, so no model
        # normalisation; L2 again where the recipe asks for it (/l2).
        return truncate(pooled[self.recipe.pooling], self.recipe.dims,
                        normalize=self.recipe.resolved_normalize(False))  # fmt: skip

    def extra_repr(self) -> str:
        return f"recipe={str(self.recipe)!r}" + _check_repr(self.check)


class AttentionPooler(nn.Module):
    """Learned-query attention over each text's real tokens: ``(B, L, H)`` -> ``(B, H)``.

    One logit per token from ``Linear(H, 1)``, softmax over the row's real tokens only
    (padding gets no weight), weighted sum. Rows must have at least one real token
    (checked unless ``check=False``; modes as in the module docstring).
    """

    def __init__(self, hidden_size: int, *, check: bool | str = True):
        super().__init__()
        self.scorer = nn.Linear(hidden_size, 1)
        check_mode(check)
        self.check = check

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, length, _ = hidden.shape
        scores = self.scorer(hidden).squeeze(-1)
        mode = check_mode(self.check)
        checks = Checks(mode) if mode else None
        if mask is None:
            real = torch.ones(b, length, dtype=torch.bool, device=hidden.device)
        else:
            real = device_mask(mask, (b, length), hidden, "mask", checks)
        first, last, count = row_bounds(real)
        if checks is not None:
            checks.add(
                count.all(), lambda: _no_real_token(count), "a row of `mask` has no real token"
            )
        # each row is one span from its first to its last real token; holes get no weight
        scores = torch.where(real, scores, torch.finfo(scores.dtype).min)
        spans = torch.stack([first, last], dim=-1)[:, None, :]
        return spans_dense(
            hidden, spans, ("attention",), scores=scores, check=mode or False, checks=checks
        )[:, 0]

    def extra_repr(self) -> str:
        return f"hidden_size={self.scorer.in_features}" + _check_repr(self.check)


class WordPooler(nn.Module):
    """Sub-token vectors to word vectors: ``(B, L, H)`` + word ids ``(B, L)`` -> ``(B, W, D)``.

    ``recipe``: a word-level :class:`~poolkit.Recipe` or a ``WORD_STRATEGIES`` name
    (default ``"first"``; layers and ``/l2`` as for :class:`Pooler`; ``strategy``: its
    deprecated spelling). Pass ``num_words`` for a forward pass without host sync: without
    it the output width is read from the ids. ``check``: see the module docstring.
    """

    def __init__(
        self,
        recipe: Recipe | str | None = None,
        *,
        check: bool | str = True,
        strategy: str | None = None,
    ):
        super().__init__()
        recipe = legacy_recipe("WordPooler", "word", recipe, {"strategy": strategy}, stacklevel=3)
        self.recipe = Recipe.parse(recipe or "first", level="word")
        if self.recipe.level != "word":
            value_error("recipe", "a word-level recipe", repr(str(self.recipe)))
        check_mode(check)
        self.check = check

    def output_dim(self, hidden_size: int) -> int:
        return self.recipe.pooled_dim(hidden_size)

    def forward(self, hidden: Any, word_ids: Any, num_words: int | None = None) -> torch.Tensor:
        mode = check_mode(self.check)
        r = self.recipe
        out = (word_embeddings if mode else words_dense)(
            LayerViews.of(hidden)[r], word_ids, r.strategy, num_words=num_words, check=mode or False
        )
        return l2_normalize(out) if r.resolved_normalize(False) else out

    def extra_repr(self) -> str:
        return f"recipe={str(self.recipe)!r}" + _check_repr(self.check)


class SpanExtractor(nn.Module):
    """Span representations with learned parts: ``(B, L, H)`` + spans ``(B, S, 2)`` -> ``(B, S, D)``.

    ``recipe``: a span-level :class:`~poolkit.Recipe` of one layer, or its strategy
    (``"endpoints"`` default, ``"x,y,x*y"``, a list of terms); ``strategy``: its deprecated
    spelling. Spans are inclusive ``[start, end]``; ``[-1, -1]`` or ``span_mask`` marks
    padded spans, which come out as zeros. ``attention`` terms use a learned
    ``Linear(H, 1)`` scorer (Lee et al. 2017). ``width_embedding_dim`` appends a learned
    embedding of the span's width bucket (``width_buckets``, default log buckets).
    ``D = output_dim``. ``check``: see the module docstring.
    """

    def __init__(
        self,
        hidden_size: int,
        recipe: Recipe | str | Sequence[str] | None = None,
        *,
        width_embedding_dim: int | None = None,
        width_buckets: Any = "log",
        check: bool | str = True,
        strategy: str | Sequence[str] | None = None,
    ):
        super().__init__()
        check_mode(check)
        self.check = check
        self.hidden_size = hidden_size
        if strategy is not None and not isinstance(strategy, str):
            strategy = ",".join(parse_span_strategy(strategy))
        recipe = legacy_recipe("SpanExtractor", "span", recipe, {"strategy": strategy},
                               stacklevel=3)  # fmt: skip
        if isinstance(recipe, Recipe | str):
            parsed = Recipe.parse(recipe, level="span")
            if parsed.level != "span" or parsed.layers is not None:
                value_error("recipe", "a span-level recipe of one layer (the hidden given)",
                            repr(str(parsed)))  # fmt: skip
            recipe = parsed.strategy
        self.strategy = parse_span_strategy(recipe or "endpoints")
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
        mode = check_mode(self.check)
        out = (span_embeddings if mode else spans_dense)(
            hidden,
            spans,
            self.strategy,
            mask=mask,
            span_mask=span_mask,
            scores=scores,
            check=mode or False,
        )
        if self.width_embedding is None:
            return out
        spans = torch.as_tensor(spans, device=hidden.device)
        padded = (spans < 0).all(dim=-1)
        if span_mask is not None:
            padded = padded | ~torch.as_tensor(span_mask, device=hidden.device).bool()
        widths = (spans[..., 1] - spans[..., 0] + 1).clamp(min=1)
        buckets = bucket_width_tensor(widths, self.width_buckets)
        width = self.width_embedding(buckets).to(out.dtype).masked_fill(padded[..., None], 0)
        return torch.cat([out, width], dim=-1)

    def extra_repr(self) -> str:
        strategy = ",".join(self.strategy)
        return f"hidden_size={self.hidden_size}, strategy={strategy!r}" + _check_repr(self.check)


def _check_repr(check: bool | str) -> str:
    return "" if check_mode(check) == "async" else f", check={check!r}"


def _no_real_token(count: torch.Tensor) -> None:
    row = int((count == 0).nonzero()[0])
    raise InputError(arg="mask", index=row, expected="a row with a real token (something to "
                     "attend to)", got="all padding")  # fmt: skip
