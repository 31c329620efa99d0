"""``poolkit.export``: the pooling you chose, shipped as a model folder any runtime loads.

Two formats:

- ``"sentence-transformers"`` (:mod:`poolkit.deploy.stfolder`): the source pipeline with
  its pooling set to the recipe; ``SentenceTransformer(DIR)`` loads it. Refused for a
  recipe ``Pooling`` cannot express (``min``, ``_no_special``, layer mixes, ...).
- ``"onnx"`` (:mod:`poolkit.deploy.graph`): one graph, token ids in, ``sentence_embedding``
  out, pooling and normalisation inside; ``tokenizer.json`` beside it. Runs with bare
  ``onnxruntime`` + ``tokenizers``; ``quantize="int8"`` quantises it.

A sparse recipe (``splade``, ...) is exported by :mod:`poolkit.deploy.sparse`: a
sentence-transformers ``SparseEncoder`` folder, or one ONNX graph with SPLADE pooling inside.

A multi-vector recipe (``multivector:tokens...``) goes to :mod:`poolkit.deploy.multivector`:
a ``MultiVectorEncoder`` folder, or a token graph with the scoring mask inside.

A recipe with a fitted transform (``mean/pca128``, :mod:`poolkit.fitted`) carries its fit:
a sentence-transformers ``Dense`` module (``x @ W - mean @ W``) after the pipeline's own
modules, or ``Sub`` and ``MatMul`` nodes in the graph's output stage.

Every folder holds ``poolkit-export.json`` (recipe, source, where the choice came from,
versions, output width, the agreement measured at export) and a README.md model card.
The folder is built under a temporary name and renamed into place once it passed its
checks, so a failed export leaves nothing behind.
"""

from __future__ import annotations

import importlib
import json
import os
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from poolkit._errors import value_error
from poolkit._versions import installed_versions
from poolkit.deploy.stage import check_stage_export, stage_ranges
from poolkit.encoder_cache import get_encoder
from poolkit.fitted import Fit, load_fits
from poolkit.output import Calibration
from poolkit.recipe import Recipe

__all__ = ["EXPORT_FORMATS", "RECORD", "export", "runtime_tokenizer"]

EXPORT_FORMATS = ("sentence-transformers", "onnx")
RECORD = "poolkit-export.json"
RECORD_VERSION = 1


def __getattr__(name: str) -> Any:
    # runtime_tokenizer lives beside the ONNX runtime (poolkit.backends.onnx), loaded on use.
    if name == "runtime_tokenizer":
        from poolkit.backends.onnx import runtime_tokenizer

        return runtime_tokenizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Texts every ONNX export is checked on: short, long, punctuation, digits, non-Latin,
# one past any max length (truncation), and one with a special token typed in it.
CHECK_TEXTS = (
    "A man is playing a guitar.",
    "hello",
    "The quick brown fox jumps over the lazy dog, again and again, while the cat watches.",
    "Zwei Hunde spielen im Schnee. 東京は日本の首都です。",
    "Prices rose 3.5% in 2024 (see table 7).",
    "a [SEP] typed in the middle of a text",
    " ".join(["pooling turns token vectors into one vector per text"] * 60),
)

_ST_LOAD = """\
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("{dir}")
vectors = model.encode(["A man is playing a guitar."])  # ({dim},) per text
"""

# A folder pooled by poolkit's module (a user's pooling): sentence-transformers imports a
# module class of another package only when asked to.
_ST_LOAD_OWN = """\
# needs poolkit and the package that installs the pooling {names}
from sentence_transformers import SentenceTransformer

model = SentenceTransformer("{dir}", trust_remote_code=True)
vectors = model.encode(["A man is playing a guitar."])  # ({dim},) per text
"""

ONNX_LOAD = """\
import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

texts = ["A man is playing a guitar.", "Hello"]
tokenizer = Tokenizer.from_file("{dir}/tokenizer.json")  # truncation, padding set
session = ort.InferenceSession("{dir}/model.onnx")
names = {{i.name for i in session.get_inputs()}}
enc = tokenizer.encode_batch(texts)
feed = {{"input_ids": [e.ids for e in enc], "attention_mask": [e.attention_mask for e in enc],
        "token_type_ids": [e.type_ids for e in enc]}}
feed = {{k: np.array(v, dtype=np.int64) for k, v in feed.items() if k in names}}
(vectors,) = session.run(["sentence_embedding"], feed)  # ({dim},) per text
"""

# The libraries whose versions each format's record holds.
_VERSIONS = {
    "sentence-transformers": ("sentence-transformers", "transformers", "torch"),
    "onnx": ("onnx", "onnxruntime", "tokenizers", "transformers", "torch"),
}


def new_record(
    encoder: Any, recipe: Recipe, format: str, choice: dict[str, Any], *, description: str,
    normalize: bool, width: int, source: dict[str, str] | None = None, fit: Fit | None = None,
) -> dict[str, Any]:  # fmt: skip
    """What every folder's :data:`RECORD` starts with; ``source``: how the source model
    pools (default: its ``ModelInfo``'s pooling and where that was read); ``fit``: the
    fitted transform the folder carries (recorded under ``fit``)."""
    info = encoder.info
    pooling = source or {"pooling": info.pooling, "pooling_source": info.pooling_source}
    record = {
        "poolkit_export": RECORD_VERSION,
        "format": format,
        "recipe": str(recipe),
        "recipe_json": recipe.to_json(),
        "description": description,
        "normalize": normalize,
        "output_dim": width,
        "max_length": encoder.max_length,
        "source": {"model": info.reference, **pooling},
        "choice": choice,
    }
    if fit is not None:  # only then: a record without a transform stays as it was
        record["fit"] = _fit_record(fit)
    return record


def _fit_record(fit: Fit) -> dict[str, Any]:
    """A record's ``fit`` entry: what the transform is, what it was fitted for and on."""
    return {"recipe": fit.recipe, "transform": fit.transform, "in_dim": fit.in_dim,
            "out_dim": fit.out_dim, "texts": fit.texts, "source": fit.source,
            "texts_digest": fit.texts_digest, "model": fit.model, "digest": fit.digest()}  # fmt: skip


def write_folder(
    out: Path, replace: bool, record: dict[str, Any], write: Callable[[Path], str]
) -> Path:
    """Build the folder ``out`` under a temporary name, renamed into place once complete:
    ``write(work)`` writes the model's files (completing ``record``) and returns the model
    card's loading snippet; then the versions, :data:`RECORD` and README.md."""
    from poolkit.deploy.card import model_card
    from poolkit.io.atomic import AtomicDir

    with AtomicDir(out, replace=replace) as work:
        load = write(work)
        record["versions"] = installed_versions(*_VERSIONS[record["format"]])
        (work / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        (work / "README.md").write_text(model_card(record, load), encoding="utf-8")
    return out


def onnx_record(graph: dict[str, Any], quantize: str | None = None, **more: Any) -> dict[str, Any]:
    """A record's ``onnx`` entry: the file, ``graph``'s opset and inputs (as its builder
    returned them), the dynamic axes, ``quantize`` and ``more``."""
    return {"file": "model.onnx", "opset": graph["opset"], "inputs": graph["inputs"], **more,
            "dynamic_axes": ["batch", "sequence"], "quantize": quantize}  # fmt: skip


def tokenizer_record(encoder: Any) -> dict[str, Any]:
    """A record's ``tokenizer`` entry for the folder's ``tokenizer.json``."""
    return {"file": "tokenizer.json", "max_length": encoder.max_length,
            "padding": "right (either side gives the same vectors)"}  # fmt: skip


def require_agreement(
    agreement: dict[str, Any], tol: float, within: str, fix: str = "Nothing was written."
) -> None:
    """ExportError unless the checked ``agreement``'s max abs diff is at most ``tol``
    (``within``: what the message says of it)."""
    if not agreement["max_abs_diff"] <= tol:
        from poolkit.errors import ExportError

        raise ExportError(
            expected=f"the exported {within}",
            got=f"it differs by {agreement['max_abs_diff']:.3g} over {agreement['texts']} texts",
            fix=fix,
        )


def encoded_feed(runner: Any, enc: list[Any]) -> dict[str, np.ndarray]:
    """``runner``'s inputs (:func:`~poolkit.backends.onnx.checked_feed`) for the
    ``tokenizers`` encodings ``enc``."""
    from poolkit.backends.onnx import checked_feed

    ids, mask, types = ([getattr(e, k) for e in enc] for k in ("ids", "attention_mask", "type_ids"))
    return checked_feed(runner, ids, mask, types)


def quiet_embed(texts: list[str], encoder: Any, recipe: Recipe, **kwargs: Any) -> Any:
    """``poolkit.embed`` of the check ``texts``, its warnings silenced (the long text is
    truncated on purpose)."""
    from poolkit.embedding import embed

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return embed(texts, model=encoder, recipe=recipe, **kwargs)


def padded_runs(tokenizer: Any, texts: list[str], size: int) -> Iterator[tuple[int, list[Any]]]:
    """``(start, encodings)`` of ``texts`` as a bare runtime feeds them: right-padded batches
    of ``size``, left-padded ones, then one text at a time; ``tokenizer`` ends right-padded."""
    pad = {"pad_id": tokenizer.padding["pad_id"], "pad_token": tokenizer.padding["pad_token"]}
    for side, step in (("right", size), ("left", size), ("right", 1)):
        tokenizer.enable_padding(direction=side, **pad)
        for start in range(0, len(texts), step):
            yield start, tokenizer.encode_batch(texts[start : start + step])


# Recipe levels with their own folders: the module's check_export refuses what a format cannot
# hold before the model loads, its export_recipe writes the folder (sequence recipes: here).
_LEVELS = {"sparse": "poolkit.deploy.sparse", "multivector": "poolkit.deploy.multivector"}


def _level(recipe: Recipe) -> Any:
    return importlib.import_module(_LEVELS[recipe.level])


def export(
    model: str | os.PathLike[str] | None,
    out_dir: str | os.PathLike[str],
    recipe: Recipe | str | None = None,
    format: str = "sentence-transformers",
    quantize: str | None = None,
    overwrite: bool = False,
    from_compare: str | os.PathLike[str] | None = None,
    calibration: Any = None,
    fit: Any = None,
) -> Path:
    """Write ``model`` pooled by ``recipe`` as a deployable folder ``out_dir``; returns it.

    Args:
        model: model directory or hub id (``None``: the default model).
        out_dir: the folder to create; it must not exist (or be empty) unless ``overwrite``.
        recipe: a :class:`~poolkit.Recipe` or any row name ``poolkit compare`` prints;
            ``None``: the model's intended pooling (a ``MultiVectorEncoder``/PyLate folder's:
            :attr:`ModelInfo.multivector`; or the top row of ``from_compare``). A
            multi-vector recipe (``multivector:tokens...``) writes a ``MultiVectorEncoder``
            folder or a token graph (:mod:`poolkit.deploy.multivector`).
        format: ``"sentence-transformers"`` or ``"onnx"`` (a sparse recipe: a
            ``SparseEncoder`` folder, or a graph whose outputs are ``sparse_embedding`` and,
            with ``/topK``, ``top_indices`` and ``top_values``).
        quantize: ``None`` or ``"int8"`` (``format="onnx"``, dense recipes only).
        overwrite: replace an existing ``out_dir`` (only once the new folder is complete).
        from_compare: a ``poolkit compare --json`` file; its top row is the recipe, and its
            figure goes into the model card. Not together with ``recipe``.
        calibration: the ranges of an int8/uint8 recipe (``mean/128/int8``), as
            :func:`poolkit.embed` takes them: texts, float vectors or a
            :class:`~poolkit.output.Calibration`; they go into the ONNX graph as constants.
            A recipe with an output stage (``/DIMS``, ``/PRECISION``) makes an ONNX graph
            return the stored form (:mod:`poolkit.deploy.stage`); a sentence-transformers
            folder holds ``/DIMS`` only.
        fit: the fit of a recipe with a fitted transform (``mean/pca128``), as
            :func:`poolkit.embed` takes it: a :class:`~poolkit.fitted.Fit`, its file, or a
            list of them; checked against the recipe, the model's width and its digest.
            ``None`` with ``from_compare``: the file its fitted top row names.

    Raises:
        InputError: a bad argument, a recipe the format cannot express, a pipeline module
            the format cannot carry, an existing ``out_dir``.
        ExportError: the ONNX graph failed its check against ``poolkit.embed``.
    """
    if format not in EXPORT_FORMATS:
        value_error("format", "'sentence-transformers' or 'onnx'", repr(format))
    if quantize not in (None, "int8"):
        value_error("quantize", "None or 'int8'", repr(quantize))
    if quantize and format != "onnx":
        value_error(
            "quantize",
            "None with the sentence-transformers format",
            repr(quantize),
            "Quantised folders are ONNX: use the onnx format.",
        )
    if not isinstance(overwrite, bool):
        value_error("overwrite", "True or False", repr(overwrite))
    if recipe is not None and from_compare is not None:
        value_error(
            "recipe",
            "None when `from_compare` is given",
            repr(str(recipe)),
            "The compare file's top row is the recipe; pass one of the two.",
        )
    parsed = Recipe.parse(recipe) if recipe is not None else None
    fits = load_fits(fit)
    if parsed is not None:
        _check_fit_recipe(parsed, fits)  # before the model loads
    if parsed is not None and parsed.level == "sequence":
        check_stage_export(parsed, format, calibration)  # before the model loads
    if parsed is not None and parsed.level in _LEVELS:
        _level(parsed).check_export(parsed, format, quantize)  # before the model loads
    elif parsed is not None and format == "sentence-transformers":
        from poolkit.deploy.stfolder import st_pooling_config

        st_pooling_config(parsed, 1)  # refuse before the model loads
    out = Path(out_dir)
    replace = overwrite or (out.is_dir() and not any(out.iterdir()))
    if out.exists() and not replace:
        value_error(
            "out_dir",
            "a folder that does not exist yet",
            repr(str(out)),
            "Choose another folder, or replace it with `overwrite=True`.",
        )
    if format == "onnx":
        from poolkit.backends.onnx import require_onnx

        require_onnx()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # truncation of the check texts is on purpose
        encoder = get_encoder(model, device="cpu")
    info = encoder.info
    source = Path(info.path)
    if from_compare is not None:
        from poolkit.deploy.card import read_compare

        parsed, choice = read_compare(from_compare, source)
        if not fits and "fit" in choice:  # a fitted top row: the fit compare saved for it
            fits = load_fits(_compare_fit_file(choice["fit"], Path(from_compare)))
    elif parsed is not None:
        choice = {"by": "recipe"}
    elif info.is_multivector_folder:  # its token pipeline, not a guessed sentence pooling
        parsed = info.intended_multivector()
        choice = {"by": "intended", "source": info.multivector_source}
    else:
        parsed = info.intended_recipe()
        choice = {"by": "intended", "source": info.pooling_source}
    _check_fit_recipe(parsed, fits)  # a compare row's or the intended recipe, too
    if (
        format == "sentence-transformers"
        and info.is_decoder
        and parsed.level in ("sequence", "multivector")
    ):
        # poolkit appends EOS and counts positions from the first real token for decoders;
        # a sentence-transformers folder would not promise the same vectors.
        value_error("model", "an encoder for the sentence-transformers format",
                    f"the decoder {info.architecture}", "Use `format='onnx'`, which carries "
                    "poolkit's EOS and position handling.")  # fmt: skip
    if parsed.level in _LEVELS:
        return _level(parsed).export_recipe(encoder, parsed, choice, out, replace, format,
                                            quantize)  # fmt: skip
    if parsed.level != "sequence":
        value_error(
            "recipe",
            "a sequence-level recipe (one vector per text)",
            repr(str(parsed)),
            "Export pools whole texts; use e.g. mean or cls.",
        )
    check_stage_export(parsed, format, calibration)  # a compare row's recipe, too
    normalize = parsed.resolved_normalize(info.normalize)
    from poolkit.plan import make_plan

    # The width the exported model gives: after the model's own modules (a Dense), the
    # fitted transform and dims; the fit checked against that width and the model's digest
    # before any calibration text runs (no fit, no transform: no digest to compute).
    plan = make_plan(encoder, {"r": parsed}, prompt="",
                     fits=fits if fits or parsed.transform is not None else None)  # fmt: skip
    (output,) = plan.outputs().values()
    fitted = plan.fits.get("r")
    ranges = stage_ranges(encoder, parsed, calibration, fits)
    record = new_record(encoder, parsed, format, choice, description=_describe(parsed),
                        normalize=normalize, width=output.dims, fit=fitted)  # fmt: skip

    def write(work: Path) -> str:
        if format == "sentence-transformers":
            _write_st(encoder, parsed, normalize, work, record, fitted)
            load = _ST_LOAD_OWN if parsed.user_poolings else _ST_LOAD
        else:
            _write_onnx(encoder, parsed, normalize, quantize, work, record, ranges, fitted)
            load = ONNX_LOAD
        stage = record.get("onnx", {}).get("output_stage")
        dim = stage["width"] if stage else record["output_dim"]  # packed bits: bytes
        return load.format(dir=os.fspath(out_dir), dim=dim,
                           names=", ".join(parsed.user_poolings))  # fmt: skip

    return write_folder(out, replace, record, write)


def _check_fit_recipe(recipe: Recipe, fits: dict[str, Fit]) -> None:
    """Refuse in one line a fitted ``recipe`` without its fit in ``fits``, or a fit that
    ``recipe`` does not take (another recipe's; any, for a recipe without a transform):
    what can be checked before the model loads (its width and digest: :func:`make_plan`)."""
    from poolkit.plan import check_fits

    fit = fits.get(str(recipe.fitted)) if recipe.fitted is not None else None
    # The fit's own width stands in for the model's, not known yet: checked once loaded.
    check_fits({"r": recipe}, {"r": fit.in_dim if fit is not None else 0}, fits)


def _compare_fit_file(row_fit: Any, compare: Path) -> Path:
    """The fit file of a compare JSON's fitted row (its ``fit`` entry): as written, else
    beside the JSON file (a relative path written from another folder); refused in one line
    where compare saved none."""
    file = row_fit.get("file") if isinstance(row_fit, dict) else None
    if not isinstance(file, str) or not file:
        value_error("fit", f"the fit of the top row of {str(compare)!r}",
                    "a row whose fit was not saved", "Pass fit= (--fit FILE), or run "
                    "compare again with the fits saved (--fits-dir DIR).")  # fmt: skip
    path = Path(file)
    if not path.is_absolute() and not path.exists() and (compare.parent / path).exists():
        return compare.parent / path
    return path


def _describe(recipe: Recipe) -> str:
    text = " concatenated with ".join(
        name.replace("_", " ") + (" without special tokens" if drop else "")
        for name, drop in recipe.parts
    )
    if recipe.layers is not None:
        how = {"mean": "averaged", "sum": "summed", "concat": "concatenated"}[recipe.layer_how]
        text += f", over layers {recipe.layers} {how}"
    return text


def _write_st(
    encoder: Any,
    recipe: Recipe,
    normalize: bool,
    work: Path,
    record: dict[str, Any],
    fit: Fit | None = None,
) -> None:
    from poolkit.backends.onnx import transformer_dir
    from poolkit.deploy.stfolder import copy_pipeline, source_heads, st_pooling_config

    info = encoder.info
    pooling = st_pooling_config(recipe, int(info.hidden_size))
    source = Path(info.path)
    if source_heads(source):
        width = info.intended_recipe().output_dim(int(info.hidden_size))
        if recipe.pooling.output_dim(int(info.hidden_size)) != width:
            value_error(
                "recipe",
                f"one of the source pooling's width {width} (its Dense "
                "modules take that many inputs)",
                repr(str(recipe)),
                "Choose a recipe with as many parts as the model's own pooling.",
            )
    width = None
    if recipe.dims is not None:
        from poolkit.plan import make_plan

        # The width /DIMS keeps columns of: the fitted transform's output where there is one.
        width = make_plan(encoder, {"r": recipe}, prompt="").stage_width("r")
    record["modules"] = copy_pipeline(source, transformer_dir(source), work, pooling, normalize,
                                      encoder.max_length, recipe.dims, width, fit)  # fmt: skip


def _write_onnx(
    encoder: Any,
    recipe: Recipe,
    normalize: bool,
    quantize: str | None,
    work: Path,
    record: dict[str, Any],
    ranges: Calibration | None = None,
    fit: Fit | None = None,
) -> None:
    from poolkit.backends.onnx import quantize_int8, transformer_dir
    from poolkit.deploy.graph import build_graph
    from poolkit.plan import make_plan

    staged, recipe = recipe, recipe.pooling  # the float graph first, then the output stage
    # The model's Dense/LayerNorm modules go into the graph as poolkit.embed applies them; a
    # module poolkit cannot apply, or a recipe width the head cannot take, is refused here
    # (PipelineError, naming the module) before anything is exported.
    heads = make_plan(encoder, {str(recipe): recipe}, prompt="").heads
    special = list(encoder.special_tokens.ids)
    fp32 = work / ("model-fp32.onnx" if quantize else "model.onnx")
    graph = build_graph(
        transformer_dir(encoder.info.path), recipe, special, normalize, fp32, heads.get(recipe)
    )
    tokenizer = write_tokenizer(encoder, work / "tokenizer.json")
    agreement = check_folder(work, fp32.name, tokenizer, encoder, recipe)
    require_agreement(
        agreement, 1e-4, "graph to agree with poolkit.embed within 1e-4 (max abs diff)"
    )
    record.update(
        onnx=onnx_record(graph, quantize, output="sentence_embedding"),
        agreement={
            "fp32": agreement,
            "graph_vs_torch_max_abs_diff": graph["max_abs_diff_vs_torch"],
        },
    )
    summary = (
        f"the ONNX graph equals poolkit.embed within {agreement['max_abs_diff']:.1e} (max abs) "
        f"on {agreement['texts']} texts, right- and left-padded, one text and many"
    )
    if quantize:
        from poolkit.backends.onnx import INT8_MIN_COS

        quantize_int8(fp32, work / "model.onnx")
        fp32.unlink()
        int8 = check_folder(work, "model.onnx", tokenizer, encoder, recipe)
        if not int8["mean_cosine"] >= INT8_MIN_COS:
            from poolkit.errors import ExportError

            raise ExportError(
                expected=f"the int8 graph's vectors to have mean cosine at least {INT8_MIN_COS} "
                "with poolkit.embed's",
                got=f"they have {int8['mean_cosine']:.4f}",
                fix="Nothing was written. Export without `quantize`.",
            )
        record["agreement"]["int8"] = int8
        summary = (
            f"before quantisation {summary}; the int8 graph's vectors have mean cosine "
            f"{int8['mean_cosine']:.4f} (min {int8['min_cosine']:.4f}) to poolkit.embed's "
            f"fp32 vectors (at least {INT8_MIN_COS} required)"
        )
    if staged.has_output_stage:
        stage = _append_stage(work / "model.onnx", tokenizer, encoder, staged, normalize, ranges,
                              fit)  # fmt: skip
        record["onnx"]["output_stage"] = stage
        record["agreement"]["stored"] = stage.pop("agreement")
        summary += "; " + record["agreement"]["stored"]["summary"]
    record["agreement"]["summary"] = summary
    record["tokenizer"] = tokenizer_record(encoder)


def _append_stage(
    path: Path,
    tokenizer: Any,
    encoder: Any,
    recipe: Recipe,
    normalize: bool,
    ranges: Calibration | None,
    fit: Fit | None = None,
) -> dict[str, Any]:
    """Append ``recipe``'s output stage (its fitted transform ``fit`` first) to the graph at
    ``path`` and check it: on :data:`CHECK_TEXTS` the graph must return, byte for byte,
    :mod:`poolkit.output`'s stored form of its own float vectors (:func:`_stage_agrees`);
    the share of values equal to ``poolkit.embed``'s stored vectors is recorded (a value
    whose float sits on a bucket edge can differ by one)."""
    import onnxruntime as ort

    from poolkit.backends.onnx import OnnxRunner
    from poolkit.deploy.stage import append_output_stage
    from poolkit.errors import ExportError
    from poolkit.output import quantize
    from poolkit.plan import stage_floats

    texts = list(CHECK_TEXTS)
    enc = tokenizer.encode_batch(texts)
    runner = OnnxRunner(path, output="sentence_embedding")
    floats = runner(**encoded_feed(runner, enc))
    width = int(floats.shape[1])
    stage = append_output_stage(path, "sentence_embedding", width, recipe.dims, normalize,
                                recipe.precision, ranges, fit)  # fmt: skip
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = session.run(["sentence_embedding"], encoded_feed(runner, enc))
    kept = stage_floats(floats, recipe, normalize, fit)  # transformed, truncated
    own = quantize(kept, recipe.precision, ranges)
    ref = quiet_embed(texts, encoder, recipe, calibration=ranges, fit=fit)
    tol = _stage_tolerance(floats, kept, fit)
    if (
        got.dtype != own.dtype
        or got.shape != own.shape
        or not _stage_agrees(got, own, kept, recipe.precision, ranges, tol)
    ):
        raise ExportError(
            expected=f"the graph's output stage {str(recipe)!r} to give poolkit.output's stored "
            "form of its own vectors",
            got=f"it gives {got.dtype} {got.shape}, {int((got != own).sum())} values apart "
            "(more than one code, or off a bucket's edge)",
            fix="Nothing was written.",
        )
    stage["calibration"] = ranges.to_json() if ranges is not None else None
    if got.dtype.kind == "f":
        diff = float(np.abs(got.astype(np.float32) - ref.astype(np.float32)).max())
        said = f"within {diff:.1e} (max abs)"
        stage["agreement"] = {"texts": len(texts), "max_abs_diff": diff}
    else:
        equal = float((got == ref).mean())
        said = f"in {equal:.2%} of values"
        stage["agreement"] = {"texts": len(texts), "equal_to_embed": equal}
    stage["agreement"]["summary"] = (
        f"its {stage['dtype']} output of {stage['dims']} dims equals poolkit.embed's stored "
        f"vectors {said}"
    )
    return stage


def _stage_tolerance(pooled: np.ndarray, kept: np.ndarray, fit: Fit | None) -> Any:
    """How far the graph's stage floats may lie from NumPy's ``kept`` (of the graph's
    ``pooled`` vectors): 1e-6; with a fitted transform, 1e-6 per unit of each row's largest
    ``|x - mean| @ |W|`` (a float32 product rounds relative to its terms, which whitening's
    small variances make large, not to its result), as the row's normalisations scale it."""
    if fit is None:
        return 1e-6
    k = kept.shape[1]
    terms = (np.abs(pooled - fit.mean) @ np.abs(fit.matrix))[:, :k]
    plain = np.linalg.norm(fit.apply(pooled)[:, :k], axis=1)
    scale = np.linalg.norm(kept, axis=1) / np.maximum(plain, 1e-12)  # 1 without normalising
    return 1e-6 * np.maximum(1.0, terms.max(axis=1) * scale)[:, None]


def _stage_agrees(
    got: np.ndarray, own: np.ndarray, floats: np.ndarray, precision: str | None,
    ranges: Calibration | None, tol: Any = 1e-6,
) -> bool:  # fmt: skip
    """Whether the graph's stored ``got`` is ``own`` (poolkit.output's stored form of the
    graph's truncated ``floats``): floats within ``tol`` (a number, or one per row:
    :func:`_stage_tolerance`); codes equal, or one apart where the float lies within ``tol``
    of that bucket's edge (the graph's and NumPy's norms may differ in the last bit); sign
    bits equal, or apart where the float is within ``tol`` of 0."""
    tol = np.broadcast_to(np.asarray(tol, np.float64), floats.shape)
    if got.dtype.kind == "f":
        return bool((np.abs(got.astype(np.float32) - own.astype(np.float32)) <= tol).all())
    if precision in ("binary", "ubinary"):
        dims = floats.shape[1]
        bits = [np.unpackbits(a.view(np.uint8), axis=1)[:, :dims] for a in (got, own)]
        apart = bits[0] != bits[1]
        return bool((np.abs(floats[apart]) <= tol[apart]).all())
    assert ranges is not None
    diff = got.astype(np.int16) - own.astype(np.int16)
    steps = np.where(ranges.steps > 0, ranges.steps, 1)
    place = (floats - ranges.starts) / steps
    edge = (np.abs(place - np.round(place)) * steps)[diff != 0]  # in value, not buckets
    return bool(np.abs(diff).max() <= 1 and (edge <= tol[diff != 0]).all())


def write_tokenizer(encoder: Any, path: Path) -> Any:
    """:func:`runtime_tokenizer` saved to ``path`` and read back from it."""
    from tokenizers import Tokenizer

    from poolkit.backends.onnx import runtime_tokenizer

    runtime_tokenizer(encoder).save(str(path))
    return Tokenizer.from_file(str(path))


def check_folder(
    folder: Path, graph: str, tokenizer: Any, encoder: Any, recipe: Recipe
) -> dict[str, Any]:
    """Run the folder as a bare runtime would and compare with ``poolkit.embed``.

    :data:`CHECK_TEXTS` as one right-padded batch, one left-padded batch and one text at a
    time; returns max abs diff, min and mean cosine per text, and the counts.
    """
    from poolkit.backends.onnx import OnnxRunner

    texts = list(CHECK_TEXTS)
    ref = quiet_embed(texts, encoder, recipe)
    runner = OnnxRunner(folder / graph, output="sentence_embedding")
    worst, cosines = 0.0, []
    for start, enc in padded_runs(tokenizer, texts, len(texts)):
        got, want = runner(**encoded_feed(runner, enc)), ref[start : start + len(enc)]
        worst = max(worst, float(np.abs(got - want).max()))
        norms = np.linalg.norm(got, axis=-1) * np.linalg.norm(want, axis=-1)
        cosines.append((got * want).sum(-1) / norms)
    cos = np.concatenate(cosines)
    return {
        "texts": len(texts),
        "batches": ["right-padded", "left-padded", "one text each"],
        "max_abs_diff": worst,
        "min_cosine": float(cos.min()),
        "mean_cosine": float(cos.mean()),
    }
