"""``Embedder``: one model per Ray actor, embeddings as new columns of each batch."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from poolkit._errors import type_error, value_error
from poolkit.ray._require import quiet_remote_args_notice, require_ray

__all__ = ["Embedder", "embed_dataset", "prepare", "resolve_request"]

Batch = Any  # pyarrow.Table or dict[str, np.ndarray]

_ENCODER_OPTIONS = ("device", "dtype", "max_length", "max_batch_tokens", "backend", "quantize",
                    "calibrate")  # fmt: skip
_RECIPE_OPTIONS = ("layers", "layer_how", "exclude_special")
# The first is the run's; the others reach the plan (checked on the actor's start).
_EMBED_OPTIONS = ("long_text", "prompt_name", "prompt", "pipeline", "calibration", "fits")
# Embedder's own keywords, which embed_dataset passes on with the options.
_EMBEDDER_KEYWORDS = ("recipe", "text_column", "normalize", "keep_text", "num_threads", "cache")


class Embedder:
    """Callable class for ``Dataset.map_batches``: adds one embedding column per recipe.

    Each actor loads one :class:`poolkit.Encoder` (once, not per batch) and embeds every
    batch on the path of :func:`poolkit.embed` (dense recipes: one
    :class:`poolkit.plan.Plan`, made when the actor starts), so values equal
    ``poolkit.embed`` on one machine (batch composition changes only float rounding).
    Torch uses as many threads as the actor has CPUs (``num_cpus`` of ``map_batches``).

    Args:
        model: model directory or hub id, as for :class:`poolkit.Encoder`; it must exist
            on every worker. ``None``: ``sentence-transformers/all-MiniLM-L6-v2``.
        strategy: ``None`` (the model's intended pooling), a name, or a list of names;
            each becomes a column of that name (shorthand for recipes).
        recipe: a :class:`poolkit.Recipe` or name, a list of them, or a mapping column
            name -> Recipe (used as they are: nothing is parsed again in the actor); not
            together with ``strategy``/``layers``/``exclude_special``.
        text_column: the string column to embed.
        normalize: L2-normalise; ``None`` follows the recipe, else the model.
        keep_text: keep ``text_column`` in the output (``False`` drops it).
        num_threads: torch threads; ``None``: the actor's CPUs (left alone outside Ray).
        cache: keyword arguments of :func:`poolkit.state_cache.open_state_cache`
            (``cache_dir``, ``max_size``, ``layers``, ``dtype``): each actor keeps token
            states in the cache root of the machine it runs on (docs/cache.md); ``None``:
            no cache.
        **options: recipe shorthands (``layers``, ``layer_how``, ``exclude_special``),
            ``long_text``, ``prompt_name``, ``prompt``, ``pipeline``, ``calibration`` (an
            int8/uint8 recipe's ranges by column name, computed once for every actor),
            ``fits`` (the :class:`~poolkit.fitted.Fit` of each recipe with a fitted
            transform, by recipe: read once, the same for every actor), or
            :class:`~poolkit.Encoder` settings (``device``, ``dtype``, ``max_length``,
            ``max_batch_tokens``, ``backend``, ``quantize``, ``calibrate``).

    ``__call__`` takes a batch (``pyarrow.Table``, or a dict of NumPy arrays) of ``B``
    rows and returns it with every input column unchanged plus the columns ``poolkit
    embed`` writes to Parquet (its family plan's ``columns``; dicts: dense ``(B, D)``, else one
    array a row), a sparse recipe's record in the table's metadata. A null or non-string
    text, or a multi-vector text that keeps no token vector, raises ``ValueError`` naming
    the row.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        strategy: str | Sequence[str] | None = None,
        *,
        recipe: Any = None,
        text_column: str = "text",
        normalize: bool | None = None,
        keep_text: bool = True,
        num_threads: int | None = None,
        cache: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> None:
        ray = require_ray()
        from poolkit.encoder import Encoder
        from poolkit.recipe import Recipe

        wanted, shorthand = resolve_request(strategy, recipe, normalize, options)
        threads = num_threads
        if threads is None and ray.is_initialized():  # the CPUs Ray gave this actor, if any
            cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
            threads = max(1, round(cpus)) if cpus else None
        encoder_kw = {k: options[k] for k in _ENCODER_OPTIONS if k in options}
        self.encoder = Encoder(model, num_threads=threads, **encoder_kw)
        if cache is not None:  # this worker's own token states, on its machine
            from poolkit.state_cache import open_state_cache

            self.encoder.state_cache = open_state_cache(**cache)
        if wanted is None:
            info = self.encoder.info
            wanted = {info.pooling: info.intended_recipe(normalize=normalize, **shorthand)}
        self.recipes: dict[str, Recipe] = wanted
        self.text_column = text_column
        self.keep_text = keep_text
        self.long_text = options.get("long_text", "truncate")
        # Prompt and pipeline checked now, on the actor's first start, not per batch; the
        # int8/uint8 ranges come computed (every actor quantises with the same ones).
        self.embed_options = {k: options[k] for k in _EMBED_OPTIONS[1:] if k in options}
        self.widths: dict[str, int] = {}  # column -> vector width, once a batch is embedded
        how = {k: v for k, v in self.embed_options.items() if k != "calibration"}
        self.plan = prepare(self.encoder, wanted, calibration=self.embed_options.get(
            "calibration") or {}, **how)  # fmt: skip

    def __repr__(self) -> str:
        return (
            f"Embedder({self.encoder!r}, recipe={[str(r) for r in self.recipes.values()]}, "
            f"text_column={self.text_column!r})"
        )

    def _texts(self, batch: Batch) -> list[str]:
        columns = _columns(batch)
        if self.text_column not in columns:
            value_error(
                "text_column",
                "a column of the dataset",
                f"{self.text_column!r}; its columns are: {', '.join(columns)}",
                "Pass text_column= to choose one.",
            )
        values = batch[self.text_column]
        texts = values.to_pylist() if hasattr(values, "to_pylist") else list(values)
        for k, text in enumerate(texts):
            if not isinstance(text, str):
                ident = f" (id {batch['id'][k]})" if "id" in columns else ""
                value_error(
                    "text_column",
                    f"a column of strings ({self.text_column!r})",
                    f"{type(text).__name__} ({text!r:.60}) in row {k} of a batch{ident}",
                    "Drop or fill nulls first.",
                )
        return texts

    def embed(self, texts: list[str]) -> dict[str, Any]:
        """This actor's recipes' vectors of ``texts``, by column name: dense ``(n, D)``
        float32; sparse a ``(n, V)`` ``scipy.sparse`` CSR array; multi-vector a list of
        ``(tokens, D)`` arrays (MUVERA: ``(n, D)``).

        Truncation is not warned about here: thousands of batches would flood the log.
        """
        from poolkit.embedding import check_inputs

        vectors, stats = self.plan.run(self.encoder, check_inputs(texts),
                                       long_text=self.long_text)  # fmt: skip
        self.widths.update(stats.dims)
        return vectors

    def _empty_row(self, batch: Batch, vectors: dict[str, Any]) -> None:
        """A multi-vector row with no token vector is refused, naming it (the local engine's
        rule: an index cannot hold an empty token set)."""
        arrays = next(iter(vectors.values()), None)  # one multi-vector recipe per Embedder
        if not isinstance(arrays, list):
            return
        empty = next((k for k, a in enumerate(arrays) if not len(a)), None)
        if empty is not None:
            ident = f"id {batch['id'][empty]}" if "id" in _columns(batch) else f"row {empty}"
            value_error("text_column", "texts that keep a token vector",
                        f"{ident}: none kept (blank, and the model adds no special token)",
                        "Remove it or give it text.")  # fmt: skip

    def __call__(self, batch: Batch) -> Batch:
        import pyarrow as pa

        if not isinstance(batch, pa.Table | Mapping):
            type_error(
                "batch",
                "a pyarrow.Table or a dict of arrays",
                type(batch).__name__,
                "Use map_batches(..., batch_format='pyarrow').",
            )
        vectors = self.embed(self._texts(batch))
        self._empty_row(batch, vectors)
        # The batch's new columns, typed as `poolkit embed` writes them to Parquet (the
        # family's plan says how), so a shard and a local file compare column for column.
        new = self.plan.columns(vectors, self.widths)
        clash = [name for name, _ in new if name in _columns(batch)]
        if clash:
            value_error(
                "ds",
                "a dataset with no column named like a strategy",
                f"columns {clash} that already exist",
                "Rename or drop them first (the embeddings are written under these names).",
            )
        if isinstance(batch, Mapping):
            out = {k: v for k, v in batch.items() if self.keep_text or k != self.text_column}
            for name, column in new:  # one NumPy value a row
                out[name] = _numpy_column(column)
            return out
        if not self.keep_text:
            batch = batch.drop_columns([self.text_column])
        for name, column in new:
            batch = batch.append_column(name, column)
        record = self.plan.record(self.widths)
        if record is not None:  # what the columns are, as poolkit embed records it
            import json

            batch = batch.replace_schema_metadata({"poolkit": json.dumps(record)})
        return batch


def prepare(encoder: Any, recipes: Mapping[str, Any], **request: Any) -> Any:
    """The plan every batch of an :class:`Embedder` runs: ``recipes`` (one family) checked
    against the loaded model and resolved once by :func:`poolkit.families.family_plan`
    (``request``: its ``prompt_name``, ``prompt``, ``pipeline``, ``calibration``; the
    prompt, the side, a sparse recipe's MLM head, a multi-vector recipe's width, the dense
    recipes' modules after pooling and int8 ranges). Raises what a bad request raises
    locally; the driver runs it before a local cluster starts, so a worker never fails to
    start on it."""
    from poolkit.families import family_plan
    from poolkit.fitted import load_fits

    if request.get("fits") is not None:  # Fits, their files, or a list of them
        request = {**request, "fits": load_fits(request["fits"])}
    return family_plan(encoder, recipes, **request)


def _columns(batch: Batch) -> list[str]:
    return list(batch.column_names) if hasattr(batch, "column_names") else list(batch)


def _numpy_column(column: Any) -> np.ndarray:
    """An Arrow list column as a NumPy array: ``(B, D)`` for fixed-size lists, else one
    array a row (an object array)."""
    import pyarrow as pa

    if pa.types.is_fixed_size_list(column.type):
        flat = column.flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(len(column), column.type.list_size)
    out = np.empty(len(column), dtype=object)
    for k, row in enumerate(column.to_pylist()):
        out[k] = np.asarray(row)
    return out


def embed_dataset(
    ds: Any,
    model: str | os.PathLike[str] | None = None,
    strategy: str | Sequence[str] | None = None,
    *,
    workers: int | None = None,
    cpus_per_worker: float = 1,
    gpus_per_worker: float = 0,
    batch_size: int | None = 256,
    fn: type[Embedder] | None = None,
    spare_cpus: float = 1,
    **embedder: Any,
) -> Any:
    """Add one embedding column per recipe to every row of a Ray ``Dataset`` (lazy).

    Runs :class:`Embedder` on a pool of up to ``workers`` actors, each holding one model,
    ``cpus_per_worker`` CPUs (torch threads) and ``gpus_per_worker`` GPUs. Actors killed
    mid-job are restarted and their batches retried (``max_restarts=-1``,
    ``max_task_retries=-1``): no row is lost or duplicated. Errors raised by poolkit
    itself (bad text) are not retried and fail the job.

    The pool starts without the cluster's last ``spare_cpus`` CPUs, which the dataset's
    other stages need (``ray.data.read_parquet`` and friends ask 1 CPU per task): a fixed
    pool of ``workers`` when they leave ``spare_cpus`` free, else as many actors as do (at
    least one), which Ray Data grows towards ``workers`` as its resource manager allows.

    Args:
        ds: a ``ray.data.Dataset`` with a string column ``text_column``.
        model, strategy, **embedder: :class:`Embedder`'s arguments (``recipe``,
            ``text_column``, ``normalize``, ``keep_text``, its options) and ``fn``'s own.
            The recipes are resolved here, once, and shipped to the actors as
            :class:`poolkit.Recipe` values.
        workers: actors in the pool; ``None``: cluster CPUs // ``cpus_per_worker``.
        batch_size: rows per ``Embedder`` call; ``None``: one call per block of ``ds``.
            Ray re-cuts blocks into ``batch_size`` rows in arrival order, so which texts
            share a call (and so float rounding) varies between runs; with ``None`` reruns
            agree bit for bit.
        fn: a subclass of :class:`Embedder` to run instead (e.g. one adding columns).
        spare_cpus: CPUs left to the dataset's other stages; 0 when every other stage
            asks for none (e.g. ``ray_remote_args={"num_cpus": 0}``).

    Raises:
        ValueError: a bad argument, or one worker's CPUs leave fewer than ``spare_cpus``
            of the cluster free (the job could never read its input).

    Returns:
        A lazy ``ray.data.Dataset``: every input column (row order is Ray's, so carry an
        id column) plus the columns :class:`Embedder` adds.
    """
    ray = require_ray()
    recipe, normalize = embedder.pop("recipe", None), embedder.get("normalize")
    # A subclass (fn=) may take keyword arguments of its own.
    wanted, shorthand = resolve_request(strategy, recipe, normalize, embedder, check=fn is None)
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        value_error("workers", "a positive integer", repr(workers))
    if not cpus_per_worker > 0:
        value_error("cpus_per_worker", "positive", repr(cpus_per_worker))
    if not spare_cpus >= 0:
        value_error("spare_cpus", "0 or more", repr(spare_cpus))
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        value_error("batch_size", "a positive integer or None", repr(batch_size))
    if fn is not None and not (isinstance(fn, type) and issubclass(fn, Embedder)):
        type_error("fn", "a subclass of Embedder", repr(fn))
    if not ray.is_initialized():
        ray.init()
    cpus = ray.cluster_resources().get("CPU", 1)
    if workers is None:
        workers = max(1, int(cpus // cpus_per_worker))
    pool = _pool(ray, workers, cpus_per_worker, cpus, spare_cpus)
    kwargs = {"model": None if model is None else os.fspath(model), **embedder}
    if wanted is None:  # the model's pooling: the actor knows it once the model loads
        kwargs.update(shorthand)
    else:  # normalize= is in the recipes
        kwargs.update(recipe=wanted, normalize=None)
    remote: dict[str, Any] = {"num_cpus": cpus_per_worker}
    if gpus_per_worker:
        remote["num_gpus"] = gpus_per_worker
    with quiet_remote_args_notice():
        return ds.map_batches(
            fn or Embedder,
            fn_constructor_kwargs=kwargs,
            batch_format="pyarrow",
            batch_size=batch_size,
            compute=pool,
            # A killed actor comes back and its in-flight batches run again on it.
            max_restarts=-1,
            max_task_retries=-1,
            **remote,
        )


def _pool(ray: Any, workers: int, cpus_per_worker: float, cpus: float, spare: float) -> Any:
    """The actor pool: ``workers`` actors if they leave ``spare`` of the cluster's ``cpus``
    free, else from as many as do up to ``workers`` (see :func:`embed_dataset`)."""
    fits = int((cpus - spare) // cpus_per_worker + 1e-9)
    if fits >= workers:
        return ray.data.ActorPoolStrategy(size=workers)
    if fits < 1:
        value_error(
            "cpus_per_worker",
            f"at most {cpus - spare:g} (the cluster's {cpus:g} CPUs less `spare_cpus`={spare:g})",
            f"{cpus_per_worker:g}: the dataset's other stages (reading, writing) could never run",
            "Ask for fewer CPUs per worker, or pass spare_cpus=0 if every other stage asks for "
            "0 CPUs.",
        )
    return ray.data.ActorPoolStrategy(min_size=fits, max_size=workers)


def resolve_request(
    strategy: Any,
    recipe: Any,
    normalize: bool | None,
    options: dict[str, Any],
    *,
    check: bool = True,
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The one resolution of :class:`Embedder`'s pooling arguments (in the driver and in
    each actor): ``options`` checked (``check``: a TypeError names an unknown one), its
    recipe shorthands taken out of it, the recipes resolved. Returns ``(recipes,
    shorthands)``: ``None`` recipes mean the model's intended one, shaped by them."""
    from poolkit.asked import resolve_recipes

    known = (*_ENCODER_OPTIONS, *_RECIPE_OPTIONS, *_EMBED_OPTIONS, *_EMBEDDER_KEYWORDS)
    if check and (unknown := sorted(set(options) - set(known))):
        type_error(
            "options",
            f"among {', '.join(known)}",
            ", ".join(unknown),
            "See poolkit.embed for their meaning.",
        )
    shorthand = {k: options.pop(k) for k in _RECIPE_OPTIONS if k in options}
    wanted, _ = resolve_recipes(strategy, recipe, normalize=normalize, **shorthand)
    return wanted, shorthand
