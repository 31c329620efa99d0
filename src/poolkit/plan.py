"""A request resolved once: what each output is, and the one path that makes it.

:func:`make_plan` takes an encoder and the recipes (output stage included) with the prompt,
the pipeline and the calibration, and resolves, before any forward pass, everything a run
needs: the prompt text, which recipes get the model's modules after pooling, each
output's width, and the int8/uint8 ranges. :meth:`Plan.run` then runs texts (or chunk
rows) to outputs; :meth:`Plan.outputs` says each output's kind, width and bytes per vector
without running the model. A job embeds its parts with one plan, so nothing is resolved
per part.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from poolkit._errors import value_error
from poolkit.driver import EmbedStats, LayerViews, drive, sequence_vectors
from poolkit.encoder import EncodedBatch, Encoder, LongText
from poolkit.families import register_family
from poolkit.fitted import Fit, transform_width
from poolkit.io.writers import dense_column
from poolkit.output import (
    Calibration,
    bytes_per_vector,
    l2_normalize,
    needs_calibration,
    quantize,
    stage_record,
    stored_dtype,
    truncate,
)
from poolkit.prompts import check_pipeline, check_prompt_pooling, resolve_prompt
from poolkit.recipe import Recipe, check_dims

__all__ = [
    "Output",
    "Plan",
    "check_fits",
    "check_output_stages",
    "head_plan",
    "make_plan",
    "pooled_width",
    "stage_floats",
]


@dataclass(frozen=True)
class Output:
    """One output of a plan, known before the model runs.

    Attributes:
        kind: ``"dense"`` (one vector per row).
        dims: dimensions of the stored vector (after the output stage).
        dtype: the stored NumPy dtype (``float32``, ``float16``, ``int8``, ``uint8``).
        bytes_per_vector: bytes one stored vector takes (bits packed eight to a byte).
    """

    kind: str
    dims: int
    dtype: np.dtype
    bytes_per_vector: int


@dataclass(frozen=True)
class Plan:
    """Dense recipes resolved for one encoder (see :func:`make_plan`).

    Attributes:
        family: ``"dense"``, the family whose plan this is (:mod:`poolkit.families`).
        recipes: name -> :class:`~poolkit.Recipe`, output stage included.
        prompt: the prompt text put before every text (``None``: none).
        heads: pooling recipe -> the model's modules after pooling it gets.
        model_normalize: whether the model normalises (a recipe's ``normalize=None``).
        widths: name -> width of the float vectors before the output stage.
        ranges: name -> the int8/uint8 ranges of the recipes that need them.
        pooled_only: the names that get no modules after pooling under ``pipeline="fit"``
            (their width does not fit them, or poolkit cannot apply them).
        fits: name -> the :class:`~poolkit.fitted.Fit` of each recipe with a fitted
            transform (``/pca128``), once given (:meth:`with_fits`).
    """

    family: ClassVar[str] = "dense"
    recipes: Mapping[str, Recipe]
    prompt: str | None
    heads: Mapping[Recipe, Any]
    model_normalize: bool
    widths: Mapping[str, int]
    ranges: Mapping[str, Calibration]
    pooled_only: tuple[str, ...] = ()
    fits: Mapping[str, Fit] = field(default_factory=dict)

    def with_fits(self, fits: Mapping[str, Fit] | None, model: str = "") -> Plan:
        """This plan with the fit of each recipe that has a fitted transform (``fits``: by
        name, or by the recipe a fit names), each checked against the recipe and its width
        (and ``model``, a model digest, when given); a missing fit is refused in one line."""
        return replace(self, fits=check_fits(self.recipes, self.widths, fits or {}, model))

    def stage_width(self, name: str) -> int:
        """Width of ``name``'s vectors after its fitted transform, before ``/DIMS``."""
        r = self.recipes[name]
        width = self.widths[name]
        return width if r.transform is None else transform_width(r.transform, width)

    def with_ranges(self, ranges: Mapping[str, Calibration] | None) -> Plan:
        """This plan with each ``/DIMS`` checked against its width and the int8/uint8
        ``ranges`` (by name) checked and set (None: not yet, as :func:`make_plan` takes
        ``calibration``): a plan made to check widths, then calibrated, with no second
        resolution."""
        staged = {name: r for name, r in self.recipes.items() if r.has_output_stage}
        widths = {name: self.stage_width(name) for name in staged}
        return replace(self, ranges=check_output_stages(staged, widths, ranges))

    def floats(self, names: Sequence[str] | None = None) -> Plan:
        """The plan of ``names`` (default: all) with no precision: the float vectors their
        int8/uint8 ranges are taken from (truncated and normalised as the recipes say)."""
        keep = list(self.recipes) if names is None else list(names)
        recipes = {n: self.recipes[n].replace(precision=None) for n in keep}
        return replace(self, recipes=recipes, widths={n: self.widths[n] for n in keep},
                       ranges={}, fits={n: f for n, f in self.fits.items() if n in keep})  # fmt: skip

    def outputs(self) -> dict[str, Output]:
        """name -> :class:`Output`, in the recipes' order."""
        out = {}
        for name, r in self.recipes.items():
            dims = r.dims or self.stage_width(name)
            out[name] = Output("dense", dims, stored_dtype(r.precision),
                               bytes_per_vector(dims, r.precision))  # fmt: skip
        return out

    def columns(
        self, vectors: Mapping[str, np.ndarray], widths: Mapping[str, int]
    ) -> list[tuple[str, Any]]:
        """Each output as a ``fixed_size_list<dtype>[D]`` Parquet column."""
        return [(name, dense_column(vectors[name])) for name in self.recipes]

    def record(self, widths: Mapping[str, int]) -> dict[str, Any] | None:
        """With an output stage, each column's recipe, dimensions kept (``widths``),
        precision and int8/uint8 ranges (:func:`poolkit.output.stage_record`); else None."""
        return stage_record(self.recipes, widths, self.ranges, self.fits)

    def run(
        self,
        encoder: Encoder,
        texts: Sequence[Any],
        *,
        long_text: LongText = "truncate",
        max_batch_tokens: int | None = None,
        progress: Callable[[int], None] | None = None,
        empty: str = "raise",
        stride: int | None = None,
        rows: Callable[[EncodedBatch], tuple[Any, np.ndarray]] | None = None,
        num_rows: int | None = None,
        tap: Callable[[EncodedBatch], None] | None = None,
    ) -> tuple[dict[str, np.ndarray], EmbedStats]:
        """Each recipe's stored vectors for checked ``texts``: ``{name: (N, D)}`` and the
        run's stats (``stats.dims``: each output's width; ``stats.calibration``: the
        ranges). ``empty`` as in :func:`poolkit.driver.sequence_vectors`; ``stride`` as in
        :func:`poolkit.driver.drive`; ``rows(batch)`` gives the rows to pool instead of
        the batch's and their places among ``num_rows`` outputs (late chunks); ``tap``
        sees every batch first. No warning is raised here."""
        unfitted = [str(r) for n, r in self.recipes.items() if r.transform and n not in self.fits]
        if unfitted:  # before the forward pass, not after it
            value_error("fit", f"the fit of {unfitted[0]!r}", "none",
                        "Pass fit= (a Fit, or its file: compare writes one).")  # fmt: skip
        n = len(texts) if num_rows is None else num_rows
        pooling = {name: r.pooling for name, r in self.recipes.items()}  # float vectors first
        out = {name: np.empty((n, self.widths[name]), np.float32) for name in pooling}

        def on_batch(batch: EncodedBatch) -> None:
            if tap is not None:
                tap(batch)
            pooled, at = (batch, batch.indices) if rows is None else rows(batch)
            vectors = sequence_vectors(LayerViews(pooled), pooling.values(), empty=empty,
                                       model_normalize=self.model_normalize,
                                       heads=self.heads)  # fmt: skip
            for name, r in pooling.items():
                out[name][at] = vectors[r]

        stats = drive(encoder, texts, on_batch,
                      all_layers=any(r.all_layers for r in pooling.values()),
                      long_text=long_text, max_batch_tokens=max_batch_tokens, progress=progress,
                      prompt=self.prompt, stride=stride)  # fmt: skip
        stats.dims = {}
        for name, r in self.recipes.items():
            if r.has_output_stage:
                out[name] = self.stage(name, out[name])
            stats.dims[name] = int(r.dims or self.stage_width(name))
        stats.calibration = dict(self.ranges)
        return out, stats

    def stage(self, name: str, vectors: np.ndarray) -> np.ndarray:
        """The stored form of ``name``'s float ``(N, D)`` vectors: its fitted transform
        applied, truncated, re-normalised where the recipe normalises, quantised with the
        ranges (:func:`stage_floats`, then :func:`poolkit.output.quantize`)."""
        r = self.recipes[name]
        floats = stage_floats(vectors, r, r.resolved_normalize(self.model_normalize),
                              self.fits.get(name))  # fmt: skip
        return quantize(floats, r.precision, self.ranges.get(name))


def make_plan(
    encoder: Encoder,
    recipes: Mapping[str, Recipe],
    *,
    prompt_name: str | None = None,
    prompt: str | None = None,
    pipeline: str = "full",
    calibration: Mapping[str, Calibration] | None = None,
    fits: Mapping[str, Fit] | None = None,
) -> Plan:
    """Resolve ``recipes`` on ``encoder`` once: the prompt (``prompt_name``/``prompt`` as in
    :func:`poolkit.embed`), the modules after pooling (``pipeline``: ``"full"``,
    ``"pooled"`` or ``"fit"``, see :func:`head_plan`), each width and
    ``dims`` checked, and each int8/uint8 recipe's ranges from ``calibration`` (by name;
    ``None``: not checked, for a plan that only says widths) and the fit of each recipe with
    a fitted transform (``fits``, see :meth:`Plan.with_fits`; ``None``: not checked, for a
    plan that only says widths or fits). Raises before any forward pass."""
    text = resolve_prompt(encoder.info, prompt_name, prompt)
    check_prompt_pooling(encoder.info, text, [s for r in recipes.values() for s, _ in r.parts])
    pooling = {name: r.pooling for name, r in recipes.items()}
    heads, model_normalize, skipped = head_plan(encoder, pooling, pipeline)
    widths = {}
    for name, r in pooling.items():
        width = pooled_width(encoder, r)
        head = heads.get(r)
        widths[name] = head.out_dim(width) if head is not None else width
    pooled_only = tuple(skipped) if pipeline == "fit" else ()
    plan = Plan(dict(recipes), text, heads, model_normalize, widths, {}, pooled_only)
    if fits is not None:
        plan = plan.with_fits(fits, fit_model(encoder))
    return plan.with_ranges(calibration)


def fit_model(encoder: Encoder) -> str:
    """The model digest a fit made on ``encoder`` records and is checked against: the
    model folder's files by content (:func:`poolkit.state_cache.model_digest`)."""
    from poolkit.state_cache import model_digest

    path = getattr(encoder.info, "path", None)
    return model_digest(path) if path else ""


def stage_floats(vectors: Any, recipe: Recipe, normalize: bool, fit: Fit | None = None) -> Any:
    """``recipe``'s float ``(N, D)`` vectors before quantisation: the fitted transform
    (``fit``; L2-normalised again where the recipe ``normalize``s), then ``/DIMS``. NumPy in,
    float32 NumPy out; a torch tensor stays one."""
    if recipe.transform is not None:
        if fit is None:
            value_error("fit", f"the fit of {str(recipe.fitted)!r}", "none")
        vectors = fit.apply(vectors)
        if normalize:
            vectors = l2_normalize(vectors)
    return truncate(vectors, recipe.dims, normalize=normalize)


def check_fits(
    recipes: Mapping[str, Recipe],
    widths: Mapping[str, int],
    fits: Mapping[str, Fit],
    model: str = "",
) -> dict[str, Fit]:
    """The fit of each recipe with a fitted transform, by name: ``fits`` keyed by the
    recipe's name or by the recipe a fit is made for (``mean/pca128``); each checked
    against the recipe, its width (``widths``: before the output stage) and ``model``."""
    by_recipe = {f.recipe: f for f in fits.values()}
    out: dict[str, Fit] = {}
    for name, r in recipes.items():
        if r.transform is None:
            continue
        fitted = str(r.fitted)
        fit = fits.get(name) or by_recipe.get(fitted)
        if fit is None:
            got = f"fits of {', '.join(sorted(by_recipe))}" if by_recipe else "none"
            value_error("fit", f"a fit of {fitted!r} (its /{r.transform} is fitted on a "
                        "corpus)", got, "Pass the fit file compare wrote for it (--fit "
                        "FILE; fit= in Python), or fit one with poolkit.fit.")  # fmt: skip
        fit.check(fitted, widths[name], model)
        out[name] = fit
    unused = [f.recipe for f in fits.values() if f not in out.values()]
    if unused:
        value_error("fit", "fits of the recipes asked for", f"a fit of {unused[0]!r}, which "
                    "no recipe uses", "Drop it, or add its recipe.")  # fmt: skip
    return out


def check_output_stages(
    staged: Mapping[str, Recipe],
    widths: Mapping[str, int],
    calibration: Mapping[str, Calibration] | None,
) -> dict[str, Calibration]:
    """Before any forward pass: each recipe's ``dims`` fits its width (``widths``: by name,
    before the output stage), and each int8/uint8 recipe has ranges of that many dimensions
    (``calibration=None``: not checked yet). Returns the ranges by name."""
    ranges: dict[str, Calibration] = {}
    for name, r in staged.items():
        width = widths[name]
        dims = width if r.dims is None else r.dims
        check_dims(dims, width, str(r))
        if calibration is None or not needs_calibration(r.precision):
            continue
        cal = calibration.get(name)
        if cal is None:
            value_error(
                "calibration", f"ranges for the {r.precision} recipe {str(r)!r}", "none",
                "Pass calibration= (texts or vectors like the corpus', or the Calibration "
                "of an earlier call's stats.calibration).",
            )  # fmt: skip
        if cal.dims != dims:
            value_error("calibration", f"ranges for {dims} dimensions ({str(r)!r})",
                        f"ranges for {cal.dims}")  # fmt: skip
        ranges[name] = cal
    return ranges


def head_plan(
    encoder: Encoder, recipes: Mapping[str, Recipe], pipeline: str
) -> tuple[dict[Recipe, Any], bool, list[str]]:
    """Which recipes get the model's modules after pooling: ``(heads, model_normalize,
    pooled-only names)``.

    ``"full"``: every recipe, checked first (:meth:`poolkit.head.Head.check` raises
    :class:`~poolkit.PipelineError` for a module poolkit cannot apply or a width the
    head cannot take); ``"pooled"``: none, and no model normalisation; ``"fit"``: the
    recipes whose width the head takes, the names of the others listed.
    """
    if pipeline == "pooled":
        return {}, False, list(recipes)
    if pipeline not in ("full", "fit"):
        check_pipeline(pipeline)
    head = encoder.head
    heads: dict[Recipe, Any] = {}
    skipped: list[str] = []
    for name, r in recipes.items():
        width = pooled_width(encoder, r)
        if pipeline == "full":
            head.check(width, name, encoder.info.reference)
        elif head.refused or not head.fits(width):
            skipped.append(name)
            continue
        if head.steps:
            heads[r] = head
    return heads, head.normalize, skipped


def pooled_width(encoder: Encoder, recipe: Recipe) -> int:
    """Width of ``recipe``'s pooled vectors on ``encoder``'s model (before any head)."""
    hidden = encoder.info.hidden_size
    if hidden:
        return recipe.pooled_dim(int(hidden))
    # No hidden size in the config: a forward pass of one word says it (pooled as the
    # plan pools, without a plan: a plan needs this width).
    width: list[int] = []
    pooling = recipe.pooling

    def on_batch(batch: EncodedBatch) -> None:
        width.append(int(sequence_vectors(LayerViews(batch), [pooling])[pooling].shape[1]))

    drive(encoder, ["x"], on_batch, all_layers=pooling.all_layers, prompt="")
    return width[0]


register_family("dense", make_plan)
