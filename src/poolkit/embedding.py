"""Text in, arrays out: ``embed``, ``embed_tokens``, ``embed_words``, ``embed_spans``.

:class:`poolkit.Encoder` batches are pooled by the core functions (through recipes);
nothing here pools on its own. Character spans (``embed_spans``) are half-open
``[start, end)`` like Python slices; they become *inclusive* token spans ``[first, last]``
here, and only here. Truncation is counted and warned about (:class:`TruncationWarning`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack

import numpy as np

from poolkit._errors import type_error, value_error
from poolkit.asked import Layers, one_recipe, resolve_recipes
from poolkit.driver import (
    EmbedStats,
    TruncationWarning,
    drive,
    user_tokens,
    warn_truncated,
)
from poolkit.encoder import EncodedBatch, Encoder, LongText, check_batch_tokens, check_texts
from poolkit.encoder_cache import ModelRef, get_encoder
from poolkit.errors import InputError
from poolkit.families import family_plan
from poolkit.fitted import load_fits
from poolkit.output import Calibration, needs_calibration, truncate
from poolkit.plan import Plan, head_plan, make_plan
from poolkit.prompts import check_pipeline, resolve_prompt
from poolkit.recipe import Recipe

__all__ = [
    "EmbedStats",
    "TokenVectors",
    "TruncationWarning",
    "embed",
    "embed_recipes",
    "embed_spans",
    "embed_tokens",
    "embed_words",
    "get_encoder",
    "resolve_recipes",
]


@dataclass(frozen=True)
class TokenVectors:
    """Tokens of one text with their vectors (special tokens removed).

    Attributes:
        tokens: ``n`` token strings.
        offsets: ``(n, 2)`` int64 half-open character offsets ``[start, end)`` into the text.
        vectors: ``(n, H)`` float32.
    """

    tokens: list[str]
    offsets: np.ndarray
    vectors: np.ndarray


def _unicode(value: str, arg: str) -> None:
    # A lone surrogate (e.g. from a JSON "\\ud800" escape) is not text; tokenizers choke on it.
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        got = f"an unpaired surrogate (\\u{ord(value[e.start]):04x}) at character {e.start}"
        raise InputError(arg=arg, expected="text", got=got, fix="Remove or replace it.") from None


def check_inputs(texts: Any, words: bool = False) -> list[Any]:
    """``texts`` (or ``words``) as a list, with types and Unicode checked up front."""
    if words and (isinstance(texts, str) or not isinstance(texts, Iterable)):
        type_error("words", "a list of word lists (one per text)", type(texts).__name__)
    items = check_texts(texts, words)
    for i, item in enumerate(items):
        if words:
            for j, word in enumerate(item):
                _unicode(word, f"words[{i}][{j}]")
        else:
            _unicode(item, f"texts[{i}]")
    return items


@dataclass(frozen=True)
class Request:
    """One ``embed*`` call resolved (:func:`resolve_request`): the checked ``inputs``, the
    ``encoder``, the ``recipes`` by name (output stage included; one for tokens, words and
    spans), ``as_dict`` (a list was asked for), the ``prompt`` text, the int8/uint8
    ``ranges`` by name, and what the caller's ``check`` returned."""

    inputs: list[Any]
    encoder: Encoder
    recipes: dict[str, Recipe]
    as_dict: bool
    prompt: str | None
    ranges: dict[str, Calibration]
    checked: Any = None
    fits: dict[str, Any] | None = None


def resolve_request(
    level: str, inputs: Any, model: ModelRef, recipe: Any = None, *,
    long_text: LongText = "truncate", max_length: int | None = None,
    max_batch_tokens: int | None = None, device: str = "auto", dtype: Any = None,
    prompt_name: str | None = None, prompt: str | None = None, pipeline: str = "full",
    calibration: Any = None, check: Callable[[list[Any]], Any] | None = None,
    refuse: Callable[[dict[str, Recipe]], None] | None = None, own_multivector: bool = False,
    fit: Any = None,
) -> Request:  # fmt: skip
    """The prologue of every ``embed*`` entry point (arguments as for :func:`embed`); all
    it can check, it checks before the model loads. ``level``: ``"sequence"`` (no recipe
    asked: the model's intended pooling), ``"word"``/``"span"`` (one recipe) or ``"token"``
    (the layer choice). ``check`` runs on the checked inputs first, ``refuse`` on the
    recipes as soon as they are known; ``own_multivector``: a multi-vector folder's own
    recipe (its token vectors) is the model's pooling, with ``pipeline="full"``; ``fit``:
    the fits of recipes with a fitted transform (:func:`poolkit.fitted.load_fits`)."""
    inputs = check_inputs(inputs, words=level == "word")
    checked = None if check is None else check(inputs)
    check_batch_tokens(max_batch_tokens)
    check_pipeline(pipeline)
    if level == "sequence":
        wanted, as_dict = resolve_recipes(None, recipe)
    else:  # one recipe (for tokens, a sequence recipe: only its layer choice counts)
        one = "sequence" if level == "token" else level
        wanted, as_dict = {one: one_recipe(one, None, recipe, None, "mean")}, False
    if wanted is not None and refuse is not None:
        refuse(wanted)
    if calibration is not None and not isinstance(calibration, Mapping):
        calibration = _calibration_source(calibration)
    fits = load_fits(fit) if fit is not None else None
    encoder = get_encoder(model, device=device, dtype=dtype, max_length=max_length)
    if wanted is None:  # the model's pooling
        info = encoder.info
        own = own_multivector and pipeline == "full" and info.is_multivector_folder
        wanted = {info.multivector: info.intended_multivector()} if own else {
            info.pooling: info.intended_recipe()}  # fmt: skip
        if refuse is not None:
            refuse(wanted)
    text = resolve_prompt(encoder.info, prompt_name, prompt)
    ranges = calibrate_recipes(encoder, wanted, calibration, long_text=long_text,
                               max_batch_tokens=max_batch_tokens, prompt_name=prompt_name,
                               prompt=prompt, pipeline=pipeline, fits=fits)  # fmt: skip
    return Request(inputs, encoder, wanted, as_dict, text, ranges, checked, fits)


class EmbedOptions(TypedDict, total=False):
    """The ``**options`` of the ``embed*`` functions: how to load and run the model, and
    the deprecated recipe keywords (see :mod:`poolkit._legacy`)."""

    max_length: int | None
    max_batch_tokens: int | None
    device: str
    dtype: Any
    pipeline: str
    strategy: str | Sequence[str] | None
    normalize: bool | None
    layers: Layers
    layer_how: str
    exclude_special: bool
    dims: int | None
    precision: str | None


#: The run options and their defaults (``pipeline`` only where a model's head applies).
RUN_OPTIONS: dict[str, Any] = {"max_length": None, "max_batch_tokens": None, "device": "auto",
                               "dtype": None, "pipeline": "full"}  # fmt: skip


def run_options(
    func: str, level: str, recipe: Any, options: Mapping[str, Any], model: ModelRef,
    pipeline: bool = True, refused: Mapping[str, bool] | None = None,
) -> tuple[Any, dict[str, Any]]:  # fmt: skip
    """``(recipe, run options)`` of an ``embed*`` call's ``**options``: the deprecated
    recipe keywords folded into ``recipe`` (warning once), the others checked by name."""
    from poolkit._legacy import legacy_recipe, split_options

    run = RUN_OPTIONS if pipeline else {k: v for k, v in RUN_OPTIONS.items() if k != "pipeline"}
    opts, legacy = split_options(func, options, run, level)
    load = lambda: get_encoder(  # noqa: E731 -- only when the model's pooling is adjusted
        model, device=opts["device"], dtype=opts["dtype"],
        max_length=opts["max_length"])  # fmt: skip
    return legacy_recipe(func, level, recipe, legacy, load, refused=refused), opts


def embed(
    texts: Sequence[str],
    model: ModelRef = None,
    recipe: Recipe | str | Sequence[Recipe | str] | None = None,
    *,
    prompt_name: str | None = None,
    prompt: str | None = None,
    calibration: Any = None,
    fit: Any = None,
    long_text: LongText = "truncate",
    return_stats: bool = False,
    progress: Callable[[int], None] | None = None,
    **options: Unpack[EmbedOptions],
) -> Any:
    """Embed texts, one vector each, with the model's intended pooling by default.

    Args:
        texts: ``N`` strings.
        model: model directory, hub id, or an :class:`Encoder`; ``None`` for the default
            ``sentence-transformers/all-MiniLM-L6-v2``. Encoders are cached, so repeated calls do not reload.
        recipe: ``None`` for the model's intended pooling (:attr:`ModelInfo.pooling`); a
            :class:`Recipe` or a recipe name (any row name ``poolkit compare`` prints, e.g.
            ``"mean"``, ``"cls+mean"``, ``"mean_no_special@last4"``, ``"mean/256/int8"``);
            or a list of them, computed from one forward pass and returned as a dict keyed
            by name.
        prompt_name: one of the model's prompts (``config_sentence_transformers.json``),
            e.g. ``"query"``; ``None``: the model's ``default_prompt_name``, if any.
        prompt: a prompt text of your own (``""``: none, not even the default); not
            together with ``prompt_name``. The prompt goes before each text, tokenized
            with it; ``include_prompt: false`` in the model's pooling config keeps its
            tokens out of pooling, as the model's pipeline does.
        calibration: the int8/uint8 ranges: texts (embedded with the recipe, before
            quantisation), float calibration vectors ``(M, D)`` (``D`` the full or the
            truncated width), a :class:`poolkit.output.Calibration` (e.g.
            ``stats.calibration[name]`` of the corpus' call, for its queries), or a dict
            of these per recipe name. Required for int8/uint8, refused otherwise.
        fit: the fit of a recipe with a fitted transform (``"mean/pca128"``,
            :mod:`poolkit.fitted`): a :class:`~poolkit.fitted.Fit` (:func:`poolkit.fit`),
            its file (``compare`` writes one per fitted row), or a list of them. Required
            for such recipes, refused otherwise.
        long_text: ``"truncate"`` (counted; warns with :class:`TruncationWarning`) or
            ``"window"`` (overlapping windows, pooled over all of a text's tokens).
        return_stats: also return an :class:`EmbedStats`.
        progress: called with the number of texts finished after each batch.
        **options: how to load and run the model (:class:`EmbedOptions`):
            ``max_length`` (tokens per sequence, specials included; default the model's),
            ``max_batch_tokens`` (token budget per forward batch; default the Encoder's,
            2048 on CPU), ``device`` and ``dtype`` (see :class:`Encoder`), and
            ``pipeline``: ``"full"`` (default) applies the modules after pooling
            (``Dense``, ``LayerNorm``, ``Normalize``) to every recipe; a recipe whose width
            a ``Dense`` cannot take, or a module poolkit cannot apply, raises
            :class:`~poolkit.PipelineError`; ``"pooled"``: the pooled vectors, before any
            of them. The recipe keywords of earlier versions (``strategy``,
            ``normalize``, ``layers``, ``layer_how``, ``exclude_special``, ``dims``,
            ``precision``) still work and warn with a ``DeprecationWarning`` naming the
            recipe to pass instead.

    A multi-vector recipe (``"multivector:tokens..."``, see :mod:`poolkit.multivector`;
    the default of a ``MultiVectorEncoder`` or PyLate folder, as its ``encode`` gives) returns one ``(tokens, D)`` float32 array per text (MUVERA: an ``(N, D)`` array); the
    side is ``prompt_name="query"`` or ``"document"`` (the default), with the folder's
    prompts, lengths, query expansion and skiplist.

    Returns:
        NumPy ``(N, D)`` in input order, or for a list a dict name -> ``(N, D_name)``;
        with ``return_stats=True`` a pair ``(result, stats)`` (``stats.calibration``:
        the ranges used). float32 unless the recipe says a precision: float16; int8
        (``int8``, and ``binary``'s packed bytes offset by 128) or uint8 (``uint8``,
        ``ubinary``), ``ceil(D / 8)`` bytes a row for bits, as sentence-transformers'
        ``quantize_embeddings`` gives them. ``N = 0`` gives ``(0, D)`` arrays. Padding
        never changes a row's value. A sparse recipe (``"splade"``, :mod:`poolkit.sparse`)
        gives a ``scipy.sparse.csr_array`` ``(N, V)`` float32 instead, ``V`` the
        vocabulary (:func:`poolkit.sparse.decode` reads a row as terms).
    """
    from poolkit.multivector.api import (
        embed_multivector_recipe,
        is_multivector,
        resolve_multivector,
    )

    # What a multi-vector recipe cannot take, named in its one refusal.
    refused = {"long_text": long_text != "truncate",
               "pipeline": options.get("pipeline", "full") != "full",
               "calibration": calibration is not None, "fit": fit is not None}  # fmt: skip
    recipe, opts = run_options("embed", "sequence", recipe, options, model, refused=refused)
    req = None if is_multivector(recipe) else resolve_request(
        "sequence", texts, model, recipe, long_text=long_text, prompt_name=prompt_name,
        prompt=prompt, calibration=calibration, own_multivector=True, fit=fit, **opts)  # fmt: skip
    if req is None or next(iter(req.recipes.values())).level == "multivector":  # a folder's own
        recipe = recipe if req is None else next(iter(req.recipes.values()))
        wanted = resolve_multivector(recipe, normalize=None, dims=None, precision=None,
                                     refused=refused)  # fmt: skip
        items = check_inputs(texts) if req is None else req.inputs
        encoder = get_encoder(model, device=opts["device"], dtype=opts["dtype"],
                              max_length=opts["max_length"])  # fmt: skip
        return embed_multivector_recipe(items, encoder, wanted, prompt_name=prompt_name,
                                        prompt=prompt, max_batch_tokens=opts["max_batch_tokens"],
                                        return_stats=return_stats, progress=progress)  # fmt: skip
    plan = family_plan(req.encoder, req.recipes, prompt_name=prompt_name, prompt=prompt,
                       pipeline=opts["pipeline"], calibration=req.ranges or {},
                       fits=req.fits)  # fmt: skip
    result, stats = plan.run(req.encoder, req.inputs, long_text=long_text,
                             max_batch_tokens=opts["max_batch_tokens"], progress=progress)  # fmt: skip
    warn_truncated(stats)
    out: Any = result if req.as_dict else next(iter(result.values()))
    return (out, stats) if return_stats else out


def fit(
    texts: Sequence[str],
    model: ModelRef = None,
    recipe: Recipe | str | Sequence[Recipe | str] = "mean/pca128",
    *,
    prompt_name: str | None = None,
    prompt: str | None = None,
    long_text: LongText = "truncate",
    **options: Unpack[EmbedOptions],
) -> Any:
    """Fit the transform of a fitted recipe (``"mean/pca128"``, ``"mean/whiten"``,
    ``"mean/abtt3"``; :mod:`poolkit.fitted`) on ``texts``: the recipe's vectors before its
    output stage, as :func:`embed` gives them, fitted without labels.

    Fit on texts like those you will embed and never on what you score: a corpus'
    documents, a train split. ``model``, ``prompt_name``, ``prompt``, ``long_text`` and
    ``**options`` as for :func:`embed` (and the same for the vectors the fit is applied to).

    Returns:
        a :class:`~poolkit.fitted.Fit` (``fit.save(path)`` writes the file ``poolkit embed
        --fit`` reads, and ``embed(..., fit=)`` takes either); for a list of recipes, a
        dict name -> Fit.
    """
    from poolkit.fitted import fit_transform
    from poolkit.io.integrity import texts_digest
    from poolkit.plan import fit_model

    recipe, opts = run_options("fit", "sequence", recipe, options, model)
    req = resolve_request("sequence", texts, model, recipe, long_text=long_text,
                          prompt_name=prompt_name, prompt=prompt, **opts)  # fmt: skip
    fitted = {name: r.fitted for name, r in req.recipes.items()}
    plain = [name for name, r in fitted.items() if r is None]
    if plain:
        value_error("recipe", "a recipe with a fitted transform (e.g. mean/pca128, "
                    "mean/whiten, mean/abtt3)", plain[0], "Add /pcaK, /whiten[K] or /abttD.")  # fmt: skip
    bases = {name: r.pooling for name, r in req.recipes.items()}
    plan = make_plan(req.encoder, bases, prompt_name=prompt_name, prompt=prompt,
                     pipeline=opts["pipeline"])  # fmt: skip
    vectors, stats = plan.run(req.encoder, req.inputs, long_text=long_text,
                              max_batch_tokens=opts["max_batch_tokens"])  # fmt: skip
    warn_truncated(stats)
    model_id, digest = fit_model(req.encoder), texts_digest(list(req.inputs))
    out = {name: fit_transform(vectors[name], str(r.transform), recipe=str(r), model=model_id,
                               source=f"{len(req.inputs)} texts", texts_digest=digest)
           for name, r in fitted.items() if r is not None}  # fmt: skip
    return out if req.as_dict else next(iter(out.values()))


def embed_recipes(
    texts: list[str],
    encoder: Encoder,
    recipes: Mapping[str, Recipe],
    *,
    long_text: LongText = "truncate",
    max_batch_tokens: int | None = None,
    progress: Callable[[int], None] | None = None,
    empty: str = "raise",
    prompt_name: str | None = None,
    prompt: str | None = None,
    pipeline: str = "full",
    calibration: Mapping[str, Calibration] | None = None,
    stride: int | None = None,
    rows: Callable[[EncodedBatch], tuple[Any, np.ndarray]] | None = None,
    num_rows: int | None = None,
    tap: Callable[[EncodedBatch], None] | None = None,
) -> tuple[dict[str, np.ndarray], EmbedStats]:
    """Each recipe's stored vectors for checked ``texts`` and the stats: one
    :func:`~poolkit.plan.make_plan` (which takes ``prompt_name`` to ``calibration``), run
    by :meth:`~poolkit.plan.Plan.run` (the other arguments). No warning is raised here."""
    plan = make_plan(encoder, recipes, prompt_name=prompt_name, prompt=prompt, pipeline=pipeline,
                     calibration=calibration or {})  # fmt: skip
    return plan.run(encoder, texts, long_text=long_text, max_batch_tokens=max_batch_tokens,
                    progress=progress, empty=empty, stride=stride, rows=rows, num_rows=num_rows,
                    tap=tap)  # fmt: skip


def recipe_kind(recipes: Mapping[str, Recipe]) -> str:
    """The one kind (:attr:`Recipe.kind`) of ``recipes``; a list mixing kinds is refused
    (each kind has its own path and output type)."""
    kinds = {r.kind for r in recipes.values()}
    if len(kinds) > 1:
        value_error("recipe", "recipes of one kind per call", ", ".join(map(str, recipes)),
                    "Embed dense and sparse recipes in separate calls.")  # fmt: skip
    return kinds.pop() if kinds else "dense"


class CalibrationTexts(list):  # type: ignore[type-arg]
    """Texts to calibrate on (a marked list: not calibration vectors)."""


def _calibration_source(value: Any) -> Any:
    """``calibration=`` as texts (a marked list), vectors (an ndarray) or a Calibration."""
    if isinstance(value, str):
        type_error("calibration", "texts, vectors or a Calibration", "a single string",
                   "Wrap it in a list, or better pass a few hundred texts like the corpus'.")  # fmt: skip
    if isinstance(value, np.ndarray | Calibration | CalibrationTexts):
        return value
    if isinstance(value, Sequence) and value and all(isinstance(t, str) for t in value):
        return CalibrationTexts(check_inputs(value))
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim != 2 or not arr.size:
        type_error("calibration", "texts, float vectors (M, D) or a Calibration",
                   f"{type(value).__name__} ({value!r:.40})")  # fmt: skip
    return arr


def calibrate_recipes(
    encoder: Encoder,
    recipes: Mapping[str, Recipe],
    calibration: Any,
    *,
    plan: Plan | None = None,
    **embed_options: Any,
) -> dict[str, Calibration]:
    """The int8/uint8 ranges of ``recipes`` by name, from ``calibration`` (see
    :func:`embed`): texts are embedded with each recipe's float vectors (truncated as it
    says); vectors wider than the recipe's ``dims`` are truncated first. Other recipes
    refuse a calibration (it would be silently unused). ``plan``: the run's plan of
    ``recipes`` (made with ``calibration=None``), whose float form embeds the texts; one is
    made from ``embed_options`` where it is None or holds other recipes."""
    needing = {name: r for name, r in recipes.items() if needs_calibration(r.precision)}
    if calibration is None:
        return {}
    if not needing:
        kind = "texts" if isinstance(calibration, CalibrationTexts) else "a calibration"
        value_error("calibration", "None for recipes without int8/uint8", kind,
                    "Drop calibration=, or ask for precision int8 or uint8.")  # fmt: skip
    per_name = (
        dict(calibration) if isinstance(calibration, Mapping)
        else dict.fromkeys(needing, calibration)
    )  # fmt: skip
    unknown = sorted(set(per_name) - set(needing))
    if unknown:
        value_error("calibration", f"keys among the int8/uint8 recipes {sorted(needing)}",
                    unknown)  # fmt: skip
    out: dict[str, Calibration] = {}
    texts_for: dict[str, Recipe] = {}
    for name, value in per_name.items():
        r, vectors = needing[name], _calibration_source(value)
        if isinstance(vectors, Calibration):
            out[name] = vectors
            continue
        if isinstance(vectors, CalibrationTexts):
            texts_for[name] = r
            continue
        if r.dims is not None and vectors.shape[1] > r.dims:
            pipeline = embed_options.get("pipeline", "full")
            _, model_normalize, _ = head_plan(encoder, {name: r.pooling}, pipeline)
            normalize = r.resolved_normalize(model_normalize)
            vectors = truncate(vectors, r.dims, normalize=normalize)
        out[name] = Calibration.from_vectors(vectors, f"{len(vectors)} calibration vectors")
    if not texts_for:
        return out
    if plan is None or any(plan.recipes.get(n) != r for n, r in texts_for.items()):
        how = {k: embed_options[k] for k in ("prompt_name", "prompt", "pipeline")
               if k in embed_options}  # fmt: skip
        fitted = {str(r.fitted) for r in texts_for.values() if r.fitted is not None}
        if fitted:  # the fits of these recipes (the others' are not this plan's)
            how["fits"] = {k: f for k, f in (embed_options.get("fits") or {}).items()
                           if f.recipe in fitted}  # fmt: skip
        plan = make_plan(encoder, texts_for, **how)
    run = {k: embed_options[k] for k in ("long_text", "max_batch_tokens") if k in embed_options}
    groups: dict[int, list[str]] = {}  # the recipes given the same texts: one pass
    for name in texts_for:
        groups.setdefault(id(per_name[name]), []).append(name)
    for names in groups.values():
        texts = list(per_name[names[0]])
        vecs, _ = plan.floats(names).run(encoder, texts, **run)
        for name in names:
            out[name] = Calibration.from_vectors(vecs[name], f"{len(texts)} calibration texts")
    return out


def embed_tokens(
    texts: Sequence[str],
    model: ModelRef = None,
    *,
    layers: Layers = None,
    layer_how: str = "mean",
    long_text: LongText = "truncate",
    max_length: int | None = None,
    max_batch_tokens: int | None = None,
    device: str = "auto",
    dtype: Any = None,
    return_stats: bool = False,
    progress: Callable[[int], None] | None = None,
    prompt_name: str | None = None,
    prompt: str | None = None,
) -> Any:
    """Per text: its tokens, their character offsets and vectors; special tokens removed.

    ``max_batch_tokens``, ``return_stats``, ``progress``, ``prompt_name`` and ``prompt``
    as for :func:`embed`: a prompt's tokens shape the others' vectors but are not
    returned, and offsets index the user's text.

    Returns:
        ``N`` :class:`TokenVectors` in input order; text ``i`` has ``n_i`` tokens
        (after truncation, which warns), vectors ``(n_i, H)`` float32.
    """
    mix = Recipe("mean", layers=layers, layer_how=layer_how)  # only its layer choice counts
    req = resolve_request("token", texts, model, mix, max_length=max_length, max_batch_tokens=max_batch_tokens, device=device,
                          dtype=dtype, prompt_name=prompt_name, prompt=prompt)  # fmt: skip
    texts, encoder, (mix,) = req.inputs, req.encoder, req.recipes.values()
    result: list[TokenVectors | None] = [None] * len(texts)

    def on_batch(batch: EncodedBatch) -> None:
        per_row, keep = mix.pool(batch, per_token=True), user_tokens(batch)
        for j, i in enumerate(batch.indices):
            ids = batch.input_ids[j][keep[j]]
            result[i] = TokenVectors(tokens=encoder.tokenizer.convert_ids_to_tokens(ids.tolist()),
                                     offsets=batch.offsets[j][keep[j]], vectors=per_row[j])  # fmt: skip

    stats = drive(encoder, texts, on_batch, all_layers=mix.all_layers, long_text=long_text,
                  max_batch_tokens=max_batch_tokens, progress=progress, prompt=req.prompt)  # fmt: skip
    warn_truncated(stats)
    return (result, stats) if return_stats else result


def embed_words(
    words: Sequence[Sequence[str]],
    model: ModelRef = None,
    recipe: Recipe | str | None = None,
    *,
    prompt_name: str | None = None,
    prompt: str | None = None,
    long_text: LongText = "truncate",
    return_stats: bool = False,
    progress: Callable[[int], None] | None = None,
    **options: Unpack[EmbedOptions],
) -> Any:
    """Word vectors for pre-split words (CoNLL style), pooled from sub-tokens.

    Args:
        words: ``N`` lists of words.
        recipe: a word-level :class:`Recipe` or its name: ``"first"`` (default),
            ``"last"``, ``"mean"``, ``"max"``, ``"endpoints"`` (``2H``), with layers as
            ``"word:mean@last4"``.
        long_text, return_stats, progress, **options: as for :func:`embed` (no
            ``pipeline``; ``strategy``, ``layers``, ``layer_how`` are deprecated).
        prompt_name, prompt: as for :func:`embed`; the prompt's words go first (split
            on whitespace) and get no row.

    Returns:
        ``N`` float32 arrays ``(W_i, D)`` in input order, one row per word. A word with no
        sub-token (e.g. only whitespace, or cut by truncation, which warns) gets zeros.
    """
    recipe, opts = run_options("embed_words", "word", recipe, options, model, pipeline=False)
    req = resolve_request("word", words, model, recipe, prompt_name=prompt_name, prompt=prompt,
                          **opts)  # fmt: skip
    words, encoder, (r,) = req.inputs, req.encoder, req.recipes.values()
    result: list[np.ndarray | None] = [None] * len(words)

    def on_batch(batch: EncodedBatch) -> None:
        counts = [len(words[i]) for i in batch.indices]
        vecs = r.pool(batch, num_words=max(max(counts), 1), model_normalize=encoder.info.normalize)
        for j, i in enumerate(batch.indices):
            result[i] = vecs[j, : counts[j]]

    stats = drive(encoder, words, on_batch, all_layers=r.all_layers, long_text=long_text,
                  max_batch_tokens=opts["max_batch_tokens"], is_split_into_words=True,
                  progress=progress, prompt=req.prompt)  # fmt: skip
    warn_truncated(stats, "word lists")
    return (result, stats) if return_stats else result


def char_to_token_spans(
    offsets: np.ndarray, valid: np.ndarray, spans: np.ndarray, *, row: int = 0
) -> np.ndarray:
    """Half-open character spans ``(S, 2)`` ``[start, end)`` of one row (text ``row``) as
    the inclusive token spans ``[first, last]`` (int64) of every token that overlaps them,
    among the ``valid`` ``(L,)`` ones (real, not special) with ``offsets`` ``(L, 2)``.
    ValueError for a span that covers no token (only whitespace, or cut by truncation)."""
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    starts, ends = offsets[:, 0], offsets[:, 1]
    hit = (
        valid[None, :]
        & (ends > starts)[None, :]
        & (starts[None, :] < spans[:, 1:2])
        & (ends[None, :] > spans[:, 0:1])
    )
    empty = np.flatnonzero(~hit.any(axis=1))
    if empty.size:
        k = int(empty[0])
        a, b = (int(x) for x in spans[k])
        value_error(
            f"char_spans[{row}][{k}]",
            f"a span that covers at least one token of texts[{row}]",
            f"({a}, {b}), which covers none (only whitespace, or past the max length: pass "
            "long_text='window')",
            "Spans are half-open [start, end) character offsets.",
        )
    first = hit.argmax(axis=1)
    last = hit.shape[1] - 1 - hit[:, ::-1].argmax(axis=1)
    return np.stack([first, last], axis=1).astype(np.int64)


def _span_pair(pair: Any, arg: str) -> tuple[int, int]:
    ok = isinstance(pair, Sequence | np.ndarray) and not isinstance(pair, str) and len(pair) == 2
    if ok:
        a, b = pair[0], pair[1]
        ok = all(isinstance(x, int | np.integer) and not isinstance(x, bool) for x in (a, b))
    if not ok:
        type_error(arg, "a (start, end) pair of ints", f"{pair!r:.60}")
    return int(a), int(b)


def _check_char_spans(texts: Sequence[str], char_spans: Any) -> list[np.ndarray]:
    if not isinstance(char_spans, Sequence | np.ndarray) or isinstance(char_spans, str):
        type_error(
            "char_spans",
            "a list with one list of (start, end) pairs per text",
            type(char_spans).__name__,
        )
    if len(char_spans) != len(texts):
        value_error("char_spans", f"one list of spans per text ({len(texts)})", len(char_spans))
    checked = []
    for i, (text, spans) in enumerate(zip(texts, char_spans, strict=True)):
        arg = f"char_spans[{i}]"
        if not isinstance(spans, Sequence | np.ndarray) or isinstance(spans, str):
            type_error(arg, "a list of (start, end) pairs", type(spans).__name__)
        if len(spans) and all(isinstance(x, int | np.integer) for x in spans):
            bare = f"{tuple(spans)!r:.40}"
            type_error(
                arg, "a list of (start, end) pairs", f"the bare pair {bare}", f"Wrap it: [{bare}]."
            )
        pairs = [_span_pair(pair, f"{arg}[{k}]") for k, pair in enumerate(spans)]
        for k, (a, b) in enumerate(pairs):
            if not 0 <= a < b <= len(text):
                value_error(
                    f"char_spans[{i}][{k}]",
                    f"(start, end) with 0 <= start < end <= len(texts[{i}]) = {len(text)}",
                    f"({a}, {b})",
                    "Spans are half-open character offsets, like text[start:end].",
                )
        checked.append(np.asarray(pairs, dtype=np.int64).reshape(-1, 2))
    return checked


def embed_spans(
    texts: Sequence[str],
    char_spans: Sequence[Sequence[tuple[int, int]]],
    model: ModelRef = None,
    recipe: Recipe | str | None = None,
    *,
    prompt_name: str | None = None,
    prompt: str | None = None,
    long_text: LongText = "truncate",
    return_token_spans: bool = False,
    return_stats: bool = False,
    progress: Callable[[int], None] | None = None,
    **options: Unpack[EmbedOptions],
) -> Any:
    """Span vectors from character spans in raw text.

    Args:
        texts: ``N`` strings.
        char_spans: per text, ``S_i`` half-open character spans ``(start, end)`` like
            ``text[start:end]``. Each becomes the *inclusive* token span of every token
            overlapping it ("at Google" in "John works at Google" -> tokens 3..4).
        recipe: a span-level :class:`Recipe` or its name: any ``span_embeddings``
            strategy, ``"endpoints"`` (default, ``2H``), ``"mean"``, ``"max"``,
            ``"attention"``, ``"diff_sum"`` or combinations like ``"x,y,x*y"``, with layers
            as ``"span:x,y,x*y@last4"``.
        return_token_spans: also return the inclusive token spans (positions in the
            tokenized text, [CLS] = 0).
        long_text, return_stats, progress, **options: as for :func:`embed` (no
            ``pipeline``; ``strategy``, ``layers``, ``layer_how`` are deprecated); texts cut
            by truncation warn with :class:`TruncationWarning`.
        prompt_name, prompt: as for :func:`embed`; ``char_spans`` still index the user's
            text, and token spans count the prompt's tokens (positions in the model input).

    Returns:
        ``N`` float32 arrays ``(S_i, D)`` in input order (then the ``N`` int64 ``(S_i, 2)``
        token spans with ``return_token_spans``, then the stats with ``return_stats``).

    Raises:
        ValueError: a span outside its text, or covering no token.
    """
    recipe, opts = run_options("embed_spans", "span", recipe, options, model, pipeline=False)
    req = resolve_request("span", texts, model, recipe, prompt_name=prompt_name, prompt=prompt,
                          check=lambda texts: _check_char_spans(texts, char_spans),
                          **opts)  # fmt: skip
    texts, encoder, spans_in, (r,) = req.inputs, req.encoder, req.checked, req.recipes.values()
    result: list[np.ndarray | None] = [None] * len(texts)
    token_spans: list[np.ndarray | None] = [None] * len(texts)

    def on_batch(batch: EncodedBatch) -> None:
        valid = user_tokens(batch)  # a span never maps to a prompt's token: offsets (0, 0)
        counts = [len(spans_in[i]) for i in batch.indices]
        width = max(max(counts), 1)
        spans = np.full((len(batch.indices), width, 2), -1, dtype=np.int64)
        for j, i in enumerate(batch.indices):
            mapped = char_to_token_spans(batch.offsets[j], valid[j], spans_in[i], row=int(i))
            spans[j, : counts[j]] = mapped
            # Positions relative to the text's first real token, so left padding is hidden.
            first_real = int(np.argmax(batch.attention_mask[j] != 0))
            token_spans[i] = mapped - first_real
        vecs = r.pool(batch, spans=spans, model_normalize=encoder.info.normalize)
        for j, i in enumerate(batch.indices):
            result[i] = vecs[j, : counts[j]]

    stats = drive(encoder, texts, on_batch, all_layers=r.all_layers, long_text=long_text,
                  max_batch_tokens=opts["max_batch_tokens"], progress=progress, prompt=req.prompt)  # fmt: skip
    warn_truncated(stats)
    out: tuple[Any, ...] = (result,)
    if return_token_spans:
        out += (token_spans,)
    if return_stats:
        out += (stats,)
    return out if len(out) > 1 else result
