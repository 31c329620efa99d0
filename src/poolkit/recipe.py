"""``Recipe``: how to pool, as one immutable value validated once.

A recipe names the level (``sequence``, ``word``, ``span``), the strategy, the encoder
layers and how they mix, whether special tokens are dropped, and L2 normalisation. Its
name is what ``poolkit compare`` prints for a row and what ``poolkit embed --recipe``
takes::

    [LEVEL:]STRATEGY[@LAYERS[:HOW]][/l2|/raw][/TRANSFORM][/DIMS][/PRECISION]

    mean                       the mean of the last layer's tokens
    cls+mean_no_special        cls, concatenated with the mean over non-special tokens
    mean@last4                 the mean over the average of the last four layers
    mean@-1,-2:concat          last two layers side by side, then the mean
    mean/raw                   never L2-normalised (``/l2``: always; neither: as the model)
    word:endpoints             word level: first and last sub-token of each word
    span:x,y,x*y               span level: a span_embeddings strategy
    mean/256                   the first 256 dimensions (L2-normalised again where the
                               recipe normalises: Matryoshka truncation)
    mean/256/int8              ... stored as int8 (float32, float16, int8, uint8, binary,
                               ubinary; int8/uint8 need calibration ranges)
    mean/binary                sign bits, packed 8 per byte
    mean/pca128                fitted on a corpus: PCA to 128 dimensions (/whiten,
                               /whiten256: BERT-whitening; /abtt3: all-but-the-top;
                               :mod:`poolkit.fitted`), then /DIMS and /PRECISION
    splade                     sparse level: one weight per vocabulary term, the max over
                               the text's tokens of log(1 + ReLU(MLM logit)) (SPLADE)
    splade_sum/top64           ... summed over tokens, the 64 largest weights kept
    multivector:tokens         multi-vector level: every token's vector, after the model's
                               own projection (late interaction, MaxSim)
    multivector:tokens/pool2/64/float16
                               ... token pooling (pool factor 2), 64 dimensions per token,
                               stored as float16
    multivector:tokens/muvera  ... folded into one MUVERA vector (``muvera:k_sim=4,dim_proj=8,
                               r_reps=20,seed=42`` sets its options)

The output stage (``/DIMS``, ``/PRECISION``) is for the sequence and multi-vector levels;
its segments come in that order after ``/l2`` or ``/raw``, and ``/float32`` (the default) is
not written. ``/poolF`` and ``/muvera`` are multi-vector only (:mod:`poolkit.multivector`).
The sparse level (:mod:`poolkit.sparse`) takes one segment, ``/topK``, and none of the
others (no layers, no normalisation, no output stage); its names need no ``sparse:``
prefix. ``Recipe.parse(str(r)) == r`` for every recipe ``r``. The compare table's older form
``mean [last4]`` is accepted too.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any

from poolkit._errors import recast, value_error
from poolkit._names import NO_SPECIAL, SEQUENCE_STRATEGIES
from poolkit.errors import InputError
from poolkit.fitted import parse_transform, transform_width
from poolkit.layers import (
    LAYER_COMBINATIONS,
    LAYER_FORMS,
    LAYER_PRESETS,
    LayerSpec,
    layer_indices,
    layer_name,
    layer_spec,
)
from poolkit.levels import (
    Level,
    RecipeError,
    bare_level,
    level_names,
    levels,
    one_of,
    register_level,
)
from poolkit.levels import level as level_spec_of
from poolkit.output import PRECISIONS, bytes_per_vector
from poolkit.poolings import pooling_names, user_pooling
from poolkit.spans import parse_span_strategy, span_embeddings, span_output_dim
from poolkit.words import WORD_STRATEGIES, word_embeddings

__all__ = ["LEVELS", "NO_SPECIAL", "Recipe", "RecipeError"]

# The built-in levels (every registered one: poolkit.levels.level_names()).
LEVELS = ("sequence", "word", "span", "sparse", "multivector")
# The fields each JSON version adds; each version is written only when a recipe needs it, and
# every one is still read.
JSON_FIELDS = {
    1: ("level", "strategy", "layers", "layer_how", "normalize"),
    2: ("dims", "precision"),
    3: ("top_k",),
    4: ("pool_factor", "muvera"),
    5: ("transform",),
}

_FORMS = (
    "[LEVEL:]STRATEGY[@LAYERS[:HOW]][/l2|/raw][/TRANSFORM][/DIMS][/PRECISION], e.g. mean, "
    "cls+mean, mean_no_special, mean@last4, mean@-1,-2:concat, mean/256/int8, mean/binary, "
    "mean/pca128, mean/whiten/int8, word:first, "
    "span:x,y,x*y, splade, splade_sum/top64, multivector:tokens/pool2/64, "
    "multivector:tokens/muvera"
)


_VALID_FORMS = f"Valid forms: {_FORMS}."


def _fail(what: str, got: object, closest: str | None = None, arg: str = "recipe") -> Any:
    hint = f" Closest valid name: {closest}." if closest else ""
    raise RecipeError(arg=arg, expected=what, got=repr(got), fix=f"{_VALID_FORMS}{hint}")


def _closest(text: str) -> str | None:
    known = [
        *_known_names(),
        *(f"{s}@{p}" for s in ("mean", "cls") for p in LAYER_PRESETS if p != "last"),
    ]
    match = difflib.get_close_matches(text.strip().lower(), known, n=1, cutoff=0.0)
    return match[0] if match else None


def _closest_name(text: str) -> str | None:
    """The closest valid name to ``text``, segment by segment: its strategy part matched
    alone (``meen`` -> ``mean``) and its valid ``@LAYERS`` and ``/SEGMENT`` parts kept
    (``meen/256/int8`` -> ``mean/256/int8``, not the closest whole string); a segment that
    makes the name invalid is left out (``splade/top0`` -> ``splade``). ``None`` when no
    valid name differs from ``text``: a hint must never repeat the name refused."""
    head, segments = text.strip(), []
    while "/" in head:
        rest, _, seg = head.rpartition("/")
        try:
            if _output_segment(seg) is None:
                break
        except RecipeError:  # a segment of a known kind with a bad value: left out below
            pass
        head = rest
        segments.insert(0, f"/{seg.strip().lower()}")
    strategy, at, layers = head.partition("@")
    closest = _closest(strategy)
    if closest is None:
        return None
    if at and "@" not in closest:
        try:
            layer_spec(layers.partition(":")[0])
            closest += at + layers.strip()
        except ValueError:
            closest = _closest(head) or closest
    if not _valid(closest):  # e.g. a bad ':HOW' after valid layers: the strategy alone
        closest = _closest(strategy) or ""
        if not _valid(closest):
            return None
    for seg in segments:  # in order, each kept only if the name stays valid with it
        if _valid(closest + seg):
            closest += seg
    return None if closest.lower() == text.strip().lower() else closest


def _valid(name: str) -> bool:
    """Whether ``name`` parses as a recipe (no hint computed)."""
    try:
        Recipe(**_split_name(name, "sequence"))
    except (InputError, ValueError):
        return False
    return True


def _known_names() -> list[str]:
    names = [*SEQUENCE_STRATEGIES, *(s + NO_SPECIAL for s in SEQUENCE_STRATEGIES)]
    names += ["cls+mean", "mean+max", *pooling_names()]
    for spec in levels(plugins=True).values():
        if spec.name != "sequence":
            names += [n if spec.bare else f"{spec.name}:{n}" for n in spec.names]
    return names


def _ask(rule: Any, *args: Any) -> Any:
    """``rule(*args)`` of a level, its error a :class:`RecipeError` (with the valid forms
    where the level gives no fix)."""
    try:
        return rule(*args)
    except InputError as e:
        raise recast(e, RecipeError).but(fix=e.fix or _VALID_FORMS) from None


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How to pool: validated when built, never again downstream.

    Attributes:
        strategy: canonical strategy text. Sequence: names from ``SEQUENCE_STRATEGIES``
            joined with ``+`` (concatenated in that order), each optionally suffixed
            ``_no_special``; word: a ``WORD_STRATEGIES`` name; span: a
            ``span_embeddings`` strategy (``"endpoints"``, ``"x,y,x*y"``, ...).
        level: a registered level (:mod:`poolkit.levels`): ``"sequence"``, ``"word"``,
            ``"span"``, ``"sparse"`` or ``"multivector"``; a name that says its level sets it
            (``Recipe("splade")`` is sparse).
        layers: ``None`` for the last layer, a ``LAYER_PRESETS`` name, or a tuple of
            layer indices (0 = embeddings output, negative from the end).
        layer_how: how several layers combine: ``mean``, ``sum`` or ``concat``.
        normalize: L2-normalise each vector; ``None`` follows the model (sequence level)
            or means no (word and span level).
        exclude_special: derived: True when every sequence part drops special tokens.
            Passing ``exclude_special=True`` adds ``_no_special`` to every part.
        dims: keep the first ``dims`` dimensions (Matryoshka truncation; L2-normalised
            again where the recipe normalises); ``None``: all. Sequence level only.
        precision: how each vector is stored (:data:`poolkit.output.PRECISIONS`);
            ``None`` (or ``"float32"``): float32. Sequence level only.
        top_k: keep each vector's ``top_k`` largest weights (sentence-transformers'
            ``max_active_dims``); ``None``: all. Sparse level only.
        pool_factor: keep about ``1 / pool_factor`` of a document's token vectors
            (:func:`poolkit.multivector.pool_tokens`); ``None``: all. Multi-vector level only
            (whose ``dims`` and ``precision`` apply per token; not int8/uint8 there).
        muvera: fold the token vectors into one MUVERA vector with these
            :class:`poolkit.multivector.MuveraOptions`; ``None``: keep them. Multi-vector
            level only.
        transform: a fitted transform (``"pca128"``, ``"whiten"``, ``"whiten256"``,
            ``"abtt3"``; :mod:`poolkit.fitted`) applied before ``dims`` and ``precision``;
            it needs a :class:`~poolkit.fitted.Fit` to run. Sequence level only.
    """

    strategy: str = "mean"
    level: str = "sequence"
    layers: LayerSpec = None
    layer_how: str = "mean"
    normalize: bool | None = None
    exclude_special: bool = False
    dims: int | None = None
    precision: str | None = None
    top_k: int | None = None
    pool_factor: float | None = None
    muvera: Any = None
    transform: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.level, str) or level_spec_of(self.level) is None:
            _fail(f"one of {', '.join(level_names())}", self.level, arg="level")
        if not isinstance(self.strategy, str) or not self.strategy.strip():
            _fail("a non-empty name", self.strategy, arg="strategy")
        self._settle(None)

    def _settle(self, canon: str | None) -> None:
        """Check the shorthand fields, read the name (``canon``: already read, as
        :meth:`replace` passes it; ``None``: read ``strategy`` now) and store what follows
        (output stage checked, ``layer_how`` of one layer, ``exclude_special``)."""
        set_ = object.__setattr__
        spec = self._level
        bare = None
        if spec.name == "sequence":
            text = self.strategy.strip().lower()
            bare = bare_level(text)
            if bare is None and _sequence_strategy(text, False) is None:
                bare = bare_level(text, plugins=True)  # another package's name, if any
        if bare is not None:
            spec = bare
            set_(self, "level", bare.name)  # the name says the level: no prefix needed
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for other in levels().values():  # each level's own fields: None on the others
            for name in other.fields:
                if name not in spec.fields and fields[name] is not None:
                    _ask(other.refuse_off_level, name, spec.name, fields[name])
        layers = check_shorthands(self.layers, self.layer_how, self.exclude_special,
                                  self.normalize)  # fmt: skip
        dims, precision = _output_values(self.dims, self.precision)
        transform = _transform_value(self.transform)
        if spec.settle is not None:
            for name, value in _ask(
                spec.settle, {**fields, "dims": dims, "precision": precision}
            ).items():
                set_(self, name, value)
        _check_level(spec, dims, precision, transform)
        if self.exclude_special and spec.name != "sequence":
            _fail(f"False at the {spec.name} level (it applies to sequences)", True,
                  arg="exclude_special")  # fmt: skip
        if canon is None:
            canon = _canonical_strategy(spec, self.strategy, self.exclude_special)
        set_(self, "dims", dims)
        set_(self, "precision", precision)
        set_(self, "transform", transform)
        set_(self, "strategy", canon)
        set_(self, "layers", layers)
        # One layer never mixes: "how" is then meaningless, so it takes its default.
        if len(layer_indices(layers)) == 1:
            set_(self, "layer_how", "mean")
        parts = self.parts
        set_(self, "exclude_special", spec.name == "sequence" and all(drop for _, drop in parts))

    @property
    def _level(self) -> Level:
        spec = level_spec_of(self.level)
        if spec is None:  # built where its family is installed, read where it is not
            raise RecipeError(arg="level", expected="a registered level", got=repr(self.level),
                              fix="Install the package of its family (entry-point group "
                              "poolkit.families) wherever the recipe is used, Ray workers "
                              "included.")  # fmt: skip
        return spec

    # ------------------------------------------------------------------ construction

    @classmethod
    def parse(cls, text: str, *, level: str | None = None, exclude_special: bool = False) -> Recipe:
        """The recipe named by ``text`` (see the module docstring for the forms).

        ``level`` is the default level for a name without a ``LEVEL:`` prefix
        (``"sequence"`` unless given); ``exclude_special`` adds ``_no_special`` to every
        part, as the field does. Raises :class:`RecipeError` (a ValueError) with
        the valid forms and the closest valid name.
        """
        if isinstance(text, Recipe):
            return text.replace(exclude_special=True) if exclude_special else text
        if not isinstance(text, str) or not text.strip():
            _fail("a recipe name", text)
        raw = text.strip()
        try:
            return cls(**_split_name(raw, level or "sequence"), exclude_special=exclude_special)
        except RecipeError as e:
            # A name is one argument: the error names `recipe`, whichever part failed.
            whole = e.but(arg="recipe", index=None) if e.arg is not None else e
            fix = _VALID_FORMS if e.fix.startswith(_VALID_FORMS) else e.fix  # the part's hint: off
            if "Closest: " in fix or "/DIMS, /PRECISION" in (e.expected or ""):  # said already
                raise whole.but(fix=fix) from None
            closest = _closest_name(raw)
            hint = f" Closest valid name: {closest}." if closest else ""  # none: no hint
            raise whole.but(fix=f"{fix}{hint}".strip()) from None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Recipe:
        """The recipe of a :meth:`to_json` dict (any version this poolkit knows)."""
        if not isinstance(data, Mapping):
            _fail("a JSON object", type(data).__name__)
        version = data.get("version")
        if version not in JSON_FIELDS:
            _fail(f"JSON of version {' or '.join(map(str, JSON_FIELDS))}", version)
        keys = {"version", *(k for v, new in JSON_FIELDS.items() if v <= version for k in new)}
        extra = sorted(set(data) - keys)
        if extra:
            _fail(f"JSON with keys among {sorted(keys)}", extra)
        fields = {k: v for k, v in data.items() if k != "version"}
        return cls(**{"strategy": "", **fields})  # a missing field: the field's default

    def to_json(self) -> dict[str, Any]:
        """A stable, versioned, JSON-ready dict; :meth:`from_json` reads it back.

        Version 1 (what poolkit wrote before output stages) unless the recipe has one:
        version 2 adds ``dims`` and ``precision``, version 3 ``top_k``, version 4
        ``pool_factor`` and ``muvera``, version 5 ``transform``."""
        version = (
            5 if self.transform is not None
            else 4 if self.pool_factor is not None or self.muvera is not None
            else 3 if self.top_k is not None
            else 2 if self.has_output_stage
            else 1
        )  # fmt: skip
        out: dict[str, Any] = {"version": version}
        for k in (k for v in range(1, version + 1) for k in JSON_FIELDS[v]):
            out[k] = getattr(self, k)
        if isinstance(self.layers, tuple):
            out["layers"] = list(self.layers)
        if self.muvera is not None:
            out["muvera"] = self.muvera.to_json()
        return out

    def replace(self, **changes: Any) -> Recipe:
        """A copy with some fields changed, validated as any new recipe; the name is read
        again only when ``strategy``, ``level`` or ``exclude_special`` changes (one parse
        per recipe)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        del fields["exclude_special"]  # derived from the name; only a change passes it
        fields.update(changes)
        if "strategy" in changes or "level" in changes or "exclude_special" in changes:
            return Recipe(**fields)
        new = object.__new__(Recipe)
        for name, value in fields.items():
            object.__setattr__(new, name, value)
        object.__setattr__(new, "exclude_special", False)  # derived again from the name
        new._settle(self.strategy)
        return new

    # ------------------------------------------------------------------ reading

    def __str__(self) -> str:
        plain = self.level == "sequence" or self._level.bare  # a bare name says its level
        name = self.strategy if plain else f"{self.level}:{self.strategy}"
        if self.layers is not None:
            name += f"@{layer_name(self.layers)}"
            if self.layer_how != "mean":
                name += f":{self.layer_how}"
        if self.pool_factor is not None:
            name += f"/pool{self.pool_factor:g}"
        if self.normalize is not None:
            name += "/l2" if self.normalize else "/raw"
        if self.transform is not None:
            name += f"/{self.transform}"
        if self.dims is not None:
            name += f"/{self.dims}"
        if self.muvera is not None:
            name += f"/{self.muvera}"
        if self.precision is not None:
            name += f"/{self.precision}"
        if self.top_k is not None:
            name += f"/top{self.top_k}"
        return name

    @property
    def kind(self) -> str:
        """What one text becomes: ``"dense"`` (a float vector, or one per word or span),
        ``"sparse"`` (one weight per vocabulary term, :mod:`poolkit.sparse`) or
        ``"multivector"`` (a ``(tokens, D)`` array, :mod:`poolkit.multivector`; with
        ``/muvera`` one dense vector), as its level says. Each kind has its own writers."""
        return self._level.kind_of(self)

    @property
    def family(self) -> str:
        """The family that computes it (:mod:`poolkit.families`): ``"sparse"``,
        ``"multivector"`` (MUVERA too: its one vector is made from the token vectors) or
        ``"dense"`` (every pooling of token states: sequence, word, span), as its level
        registered (:mod:`poolkit.levels`)."""
        return self._level.family

    @property
    def has_output_stage(self) -> bool:
        """Whether the recipe transforms, truncates or stores at a precision other than
        float32."""
        return self.dims is not None or self.precision is not None or self.transform is not None

    @property
    def pooling(self) -> Recipe:
        """The same recipe without its output stage: the float32 vectors it starts from."""
        if not self.has_output_stage:
            return self
        return self.replace(dims=None, precision=None, transform=None)

    @property
    def fitted(self) -> Recipe | None:
        """The recipe a fit is made for: with its transform, without ``/DIMS`` and
        ``/PRECISION`` (``None``: it has no transform)."""
        if self.transform is None:
            return None
        return self.replace(dims=None, precision=None) if self.dims or self.precision else self

    @property
    def parts(self) -> tuple[tuple[str, bool], ...]:
        """Sequence level: ``(name, drops special tokens)`` per concatenated part."""
        if self.level != "sequence":
            return ()
        out = []
        for piece in self.strategy.split("+"):
            drop = piece.endswith(NO_SPECIAL)
            out.append((piece[: -len(NO_SPECIAL)] if drop else piece, drop))
        return tuple(out)

    @property
    def user_poolings(self) -> tuple[str, ...]:
        """The parts that are users' poolings (:mod:`poolkit.poolings`), in order: every
        part a parsed recipe holds is built in or registered."""
        return tuple(name for name, _ in self.parts if name not in SEQUENCE_STRATEGIES)

    @property
    def all_layers(self) -> bool:
        """Whether the encoder must return every layer's hidden states."""
        return self.layers is not None

    def output_dim(self, hidden_size: int) -> int:
        """Width of one output vector for a model with ``hidden_size`` (H): ``dims`` when
        the recipe truncates (checked against the pooled width), else the pooled width.
        Packed bits store ``ceil(output_dim / 8)`` bytes: see :meth:`bytes_per_vector`."""
        width = self.pooled_dim(hidden_size)
        if self.transform is not None:
            width = transform_width(self.transform, width)
        if self.dims is None:
            return width
        check_dims(self.dims, width, str(self))
        return self.dims

    def bytes_per_vector(self, hidden_size: int) -> int:
        """Bytes one stored vector takes for a model with ``hidden_size``."""
        return bytes_per_vector(self.output_dim(hidden_size), self.precision)

    def pooled_dim(self, hidden_size: int) -> int:
        """Width of the pooled vector (before any model module and the output stage)."""
        if not isinstance(hidden_size, int) or hidden_size < 1:
            value_error("hidden_size", "a positive integer", repr(hidden_size))
        width = hidden_size
        if self.layer_how == "concat":
            width *= len(layer_indices(self.layers))
        spec = self._level
        if spec.width is None:
            value_error("recipe", "a recipe of fixed width", str(self))
        return spec.width(self, width)

    def resolved_normalize(self, model_normalize: bool) -> bool:
        """Whether vectors are L2-normalised for a model that says ``model_normalize`` (at
        the multi-vector level: per token, as the folder's token-level ``Normalize``)."""
        if self.normalize is not None:
            return self.normalize
        return bool(model_normalize) if self._level.model_normalize else False

    # ------------------------------------------------------------------ applying

    def pool(
        self,
        batch: Any,
        *,
        spans: Any = None,
        num_words: int | None = None,
        model_normalize: bool = False,
        head: Any = None,
        empty: str = "raise",
        views: Any = None,
        per_token: bool = False,
    ) -> Any:
        """This recipe's float32 NumPy vectors for one encoder batch, in its row order.

        ``batch``: an :class:`poolkit.encoder.EncodedBatch` or alike: ``hidden``
        ``(B, L, H)`` (``hidden_states`` when the recipe mixes layers), ``attention_mask``,
        ``special_tokens_mask``, ``pool_mask`` (or None) and ``word_ids`` ``(B, L)``.
        ``spans``: ``(B, S, 2)`` inclusive token spans, ``[-1, -1]`` padding; ``num_words``:
        ``W`` (default: largest word id + 1). L2 as :meth:`resolved_normalize` of
        ``model_normalize``, after ``head`` (a :class:`poolkit.head.Head`, sequence level).
        ``empty`` as in :func:`poolkit.driver.sequence_vectors`, which pools the sequence
        level; ``views``: the batch's ``LayerViews``, shared with other recipes. Returns
        ``(B, D)``, ``(B, W, D)`` or ``(B, S, D)``, zeros for missing words and padded spans.
        ``per_token``: no pooling, the token level of this recipe's layer mix: ``B`` arrays
        ``(n_i, D)``, the vectors of :func:`poolkit.driver.user_tokens`, never normalised.
        """
        from poolkit.driver import (
            LayerViews,
            l2_normalize,
            on_accelerator,
            sequence_vectors,
            to_float32_numpy,
            user_tokens,
        )
        from poolkit.tokens import token_embeddings

        if self.level not in _POOLING_LEVELS:
            value_error("recipe", "a recipe pooling token states here (sequence, word or span "
                                  "level)", str(self), "Use poolkit.embed(texts, model, recipe=...).")  # fmt: skip
        views = LayerViews(batch) if views is None else views
        if per_token:
            hidden = views[self]
            if on_accelerator(hidden):  # one copy of the batch, not one per row
                hidden = to_float32_numpy(hidden)
            return [to_float32_numpy(v) for v in token_embeddings(hidden, ~user_tokens(batch))]
        if self.level == "sequence":
            heads = {self: head} if head is not None else None
            return sequence_vectors(views, [self], model_normalize=model_normalize, empty=empty,
                                    heads=heads)[self]  # fmt: skip
        if self.level == "word":
            vecs = word_embeddings(views[self], batch.word_ids, self.strategy, num_words=num_words)
        else:
            vecs = span_embeddings(views[self], spans, self.strategy, mask=batch.attention_mask)
        vecs = to_float32_numpy(vecs)
        return l2_normalize(vecs) if self.resolved_normalize(model_normalize) else vecs


# ---------------------------------------------------------------------- helpers


def _user_width(name: str, width: int) -> int:
    """The width of the user pooling ``name`` on ``width``-wide token states (read once)."""
    pooling = user_pooling(name)
    assert pooling is not None  # the name was checked when the recipe was built
    return pooling.width(width)


def check_dims(dims: int, width: int, recipe: str) -> None:
    """Refuse ``dims`` wider than the vectors it truncates (one line naming the fix)."""
    if dims > width:
        raise RecipeError(
            arg="dims", expected=f"at most the recipe's width {width}", got=dims, fix=f"Keep at most {width} dimensions of {recipe.rsplit('/', 1)[0]!r}, "
                     f"e.g. '/{min(256, width)}'."
        )  # fmt: skip


def check_shorthands(layers: Any, layer_how: Any, exclude_special: Any, normalize: Any) -> Any:
    """The fields a recipe takes beside its name, checked (a :class:`RecipeError` or
    TypeError naming the argument); returns the layers as :func:`layer_spec` reads them.
    Callers that must check them before the name is known (the model's pooling) use this
    rather than building a recipe of a stand-in name."""
    if not isinstance(exclude_special, bool):
        _fail("True or False", exclude_special, arg="exclude_special")
    if normalize is not None and not isinstance(normalize, bool):
        _fail("True, False or None", normalize, arg="normalize")
    try:
        spec = layer_spec(layers)
    except (TypeError, ValueError) as e:  # a recipe refuses with a RecipeError (ValueError)
        raise recast(e, RecipeError) from None
    if layer_how not in LAYER_COMBINATIONS:
        _fail(f"one of {', '.join(LAYER_COMBINATIONS)}", layer_how, arg="layer_how")
    return spec


def check_output_stage(level: str, dims: Any, precision: Any) -> tuple[int | None, str | None]:
    """``(dims, precision)`` checked for ``level`` and normalised (``float32`` -> None); one
    :class:`RecipeError` line naming the argument otherwise. No strategy is parsed."""
    dims, precision = _output_values(dims, precision)
    spec = level_spec_of(level)
    assert spec is not None, level
    _check_level(spec, dims, precision)
    return dims, precision


def _output_values(dims: Any, precision: Any) -> tuple[int | None, str | None]:
    """``(dims, precision)`` checked and normalised (``float32`` -> None), for any level."""
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or dims < 1):
        _fail("a positive number of dimensions, e.g. /256", dims, arg="dims")
    if precision is not None:
        if not isinstance(precision, str) or precision.strip().lower() not in PRECISIONS:
            got = precision
            close = difflib.get_close_matches(str(got).lower(), PRECISIONS, n=1)
            hint = f" Closest: {close[0]}." if close else ""
            raise RecipeError(arg="precision", expected=f"one of {', '.join(PRECISIONS)}", got=repr(got), fix=hint.strip())  # fmt: skip
        precision = precision.strip().lower()
        if precision == "float32":
            precision = None
    return dims, precision


def _transform_value(transform: Any) -> str | None:
    """``transform`` checked and spelled canonically (``None``: none)."""
    if transform is None:
        return None
    canon = parse_transform(transform.strip().lower()) if isinstance(transform, str) else None
    if canon is None:
        _fail("a transform: pcaK, whiten, whitenK or abttD (e.g. pca128)", transform,
              arg="transform")  # fmt: skip
    return canon


def _check_level(
    spec: Level, dims: int | None, precision: str | None, transform: str | None = None
) -> None:
    """Refuse an output stage on a level that takes none."""
    if transform is not None and not spec.fitted:
        raise RecipeError(
            arg="transform", expected=f"no fitted transform at the {spec.name} level",
            got=f"/{transform}", fix="A fitted transform maps one vector per text: use a "
            "sequence-level recipe, e.g. mean/pca128."
        )  # fmt: skip
    if not spec.output_stage and (dims is not None or precision is not None):
        what = "dims" if dims is not None else "precision"
        got = f"/{dims if what == 'dims' else precision}"
        raise RecipeError(
            arg=what, expected=f"no output stage (/DIMS, /PRECISION) at the {spec.name} level", got=got, fix="An output stage stores one vector per text: use a sequence-level "
                     "recipe, or drop it."
        )  # fmt: skip


def _output_segment(segment: str) -> tuple[str, Any] | None:
    low = segment.strip().lower()
    if low in ("l2", "raw"):
        return "normalize", low == "l2"
    if low.isdigit():
        return "dims", int(low)
    if low in PRECISIONS:
        return "precision", low
    if (transform := parse_transform(low)) is not None:
        return "transform", transform
    # The segments a level adds (/topK, /poolF, /muvera); other packages' levels are loaded
    # only for a segment none of the loaded ones knows.
    for plugins in (False, True):
        for spec in levels(plugins=plugins).values():
            if spec.segment is not None and (seg := _ask(spec.segment, low)) is not None:
                return seg
    return None


def _split_name(text: str, level: str) -> dict[str, Any]:
    """``text`` cut into Recipe fields (not yet validated)."""
    out: dict[str, Any] = {"level": level}
    # Trailing /SEGMENTs: /l2 or /raw, /DIMS, /PRECISION (a span strategy may hold '/': only
    # segments that name one of these are taken).
    while "/" in text:
        head, _, tail = text.rpartition("/")
        seg = _output_segment(tail)
        if seg is None:
            if level == "sequence" and difflib.get_close_matches(tail.lower(), PRECISIONS, n=1):
                check_output_stage(level, None, tail)  # "mean/int4": says which precisions
            break
        key, value = seg
        if key in out:
            _fail(f"at most one /{key} segment", f"/{tail}")
        out[key] = value
        text = head
    # The compare table's older spelling: "mean [last4]".
    if text.endswith("]") and " [" in text:
        text, _, bracket = text[:-1].rpartition(" [")
        text = f"{text}@{bracket}"
    head, prefix, rest = text.partition(":")
    if prefix and level_spec_of(head.strip().lower()) is not None and "@" not in head:
        out["level"] = head.strip().lower()
        text = rest
    strategy, at, layers = text.partition("@")
    out["strategy"] = strategy
    if at:
        spec, colon, how = layers.partition(":")
        if colon:
            out["layer_how"] = how.strip().lower()
        try:
            out["layers"] = layer_spec(spec)
        except ValueError:  # a name's part: the message gives the forms of the whole name
            _fail(LAYER_FORMS, spec.strip(), arg="layers")
    return out


def _canonical_strategy(spec: Level, strategy: str, exclude_special: bool) -> str:
    """``strategy`` checked against the level ``spec`` and spelled canonically."""
    text = strategy.strip().lower()
    canon = _ask(spec.canonical, text, exclude_special)
    if canon is None:
        closest = _closest(text if spec.bare or spec.name == "sequence" else f"{spec.name}:{text}")
        _fail(spec.expected, strategy, closest, "strategy")
    return canon


def _sequence_strategy(text: str, exclude_special: bool) -> str | None:
    parts = []
    for piece in text.replace(",", "+").split("+"):
        name = piece.strip()
        drop = name.endswith(NO_SPECIAL) or exclude_special
        base = name[: -len(NO_SPECIAL)] if name.endswith(NO_SPECIAL) else name
        if base not in SEQUENCE_STRATEGIES and user_pooling(base) is None:
            return None
        parts.append(base + (NO_SPECIAL if drop else ""))
    return "+".join(parts)


def _span_strategy(text: str, exclude_special: bool) -> str | None:
    compact = text.replace(" ", "")
    try:
        parse_span_strategy(compact)
    except ValueError:
        return None
    return compact


def _sequence_width(recipe: Recipe, width: int) -> int:
    return sum(
        width if name in SEQUENCE_STRATEGIES else _user_width(name, width)
        for name, _ in recipe.parts
    )


# The levels of the dense family: each pools token states (Recipe.pool).
_DENSE_LEVELS = (
    Level(
        name="sequence",
        family="dense",
        canonical=_sequence_strategy,
        expected=f"one of {', '.join(SEQUENCE_STRATEGIES)} or a registered pooling (join "
        f"several with '+'; suffix {NO_SPECIAL} to drop special tokens)",
        names=tuple(SEQUENCE_STRATEGIES),  # so that no bare name of another level takes one
        output_stage=True,
        fitted=True,
        model_normalize=True,
        width=_sequence_width,
    ),
    Level(
        name="word",
        family="dense",
        canonical=one_of(WORD_STRATEGIES),
        expected=f"one of {', '.join(WORD_STRATEGIES)}",
        names=tuple(WORD_STRATEGIES),
        width=lambda recipe, width: span_output_dim(width, WORD_STRATEGIES[recipe.strategy]),
    ),
    Level(
        name="span",
        family="dense",
        canonical=_span_strategy,
        expected="comma-joined terms from endpoints, mean, max, attention, diff_sum, x, y, "
        "or x?y with ? in - + * /",
        names=("endpoints", "mean", "max", "diff_sum", "attention", "x,y,x*y"),
        width=lambda recipe, width: span_output_dim(width, recipe.strategy),
    ),
)
_POOLING_LEVELS = tuple(spec.name for spec in _DENSE_LEVELS)
for _spec in _DENSE_LEVELS:
    register_level(_spec)
