"""Where the vectors go: a Qdrant index that holds what ``compare`` scored.

:func:`index_texts` embeds texts with the one plan (every recipe a named vector of one
collection, fitted transforms with their fits) and upserts them into an embedded Qdrant
shard (Qdrant Edge, :mod:`poolkit.index.edge`: Qdrant's own engine in-process, no server).
:func:`search` embeds queries by the route the index recorded (the model, the query prompt,
the fits) and returns the nearest ids with their scores, exactly as ``compare`` ranks them
(exact search by default; cosine of float32 vectors).

The index folder holds the shard and ``poolkit-index.json``: the model (its reference and
content digest), each vector's recipe, the fits (copied beside it, so a search needs nothing
else), the documents' and queries' prompts, and the command that built it. A later write or
search that names another model or recipe is refused in one line. The user's ids are kept:
each point's id is the UUIDv5 of the id as text (Qdrant takes integers and UUIDs only), the
id itself in the payload (``id``) with the fields kept (``keep``); an upsert keyed by id
makes a rerun of a killed job add no duplicate.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from poolkit._names import file_slug
from poolkit.errors import InputError
from poolkit.index.edge import ID_NAMESPACE, point_id
from poolkit.io.integrity import short_digest

__all__ = ["ID_NAMESPACE", "RECORD", "IndexRecord", "index_texts", "point_id", "search"]

RECORD = "poolkit-index.json"
RECORD_VERSION = 1


@dataclass
class IndexRecord:
    """What an index holds (``poolkit-index.json``): the model (``model``: as given,
    ``model_digest``: its files' content), each named vector's recipe and width, each fit's
    digest and file (relative to the index), the documents' and queries' prompt names (None:
    the model's default), and the poolkit version."""

    model: str
    model_digest: str
    vectors: dict[str, dict[str, Any]]
    fits: dict[str, dict[str, str]] = field(default_factory=dict)
    prompt_name: str | None = None
    query_prompt_name: str | None = None
    max_length: int | None = None
    poolkit: str = ""
    version: int = RECORD_VERSION

    @classmethod
    def read(cls, folder: Path) -> IndexRecord | None:
        """The record of ``folder`` (None: there is none)."""
        path = Path(folder) / RECORD
        if not path.is_file():
            return None
        data: Any = None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("version") == RECORD_VERSION:
                return cls(**data)
        except (ValueError, TypeError):
            pass
        version = data.get("version") if isinstance(data, dict) else None
        raise InputError(where=path, expected=f"a poolkit index record of version "
                         f"{RECORD_VERSION}", got=f"it is not one (version {version!r})",
                         fix="Index again into a new folder.")  # fmt: skip

    def write(self, folder: Path) -> None:
        from poolkit.io.atomic import atomic_write

        data = json.dumps(asdict(self), indent=1).encode()
        atomic_write(Path(folder) / RECORD, lambda f: f.write(data), size=len(data))

    def same_as(self, other: IndexRecord, where: Path) -> None:
        """Refuse, in one line naming both, a write of another model, recipe or fit."""
        if other.model_digest != self.model_digest:
            raise InputError(where=where, expected=f"the model it was built with "
                             f"({self.model}, digest {short_digest(self.model_digest)})",
                             got=f"{other.model} (digest {short_digest(other.model_digest)})",
                             fix="Index into a new folder, or use the index's model.")  # fmt: skip
        for what in ("vectors", "fits", "prompt_name", "query_prompt_name", "max_length"):
            if getattr(other, what) != getattr(self, what):
                raise InputError(where=where, expected=f"the {what} it was built with "
                                 f"({getattr(self, what)})", got=str(getattr(other, what)),
                                 fix="Index into a new folder, or ask for the same.")  # fmt: skip


def _folder(target: Any) -> Path:
    """``target`` as the index folder; a server URL is refused in one line (not built yet)."""
    text = os.fspath(target)
    if text.startswith(("http://", "https://")):
        raise InputError(arg="target", expected="an index folder (an embedded Qdrant Edge "
                         "shard)", got=text, fix="A Qdrant server or cluster by URL is not "
                         "supported yet: index into a folder.")  # fmt: skip
    return Path(text)


def _plan(encoder: Any, recipes: Mapping[str, Any], fits: Mapping[str, Any], prompt_name: Any):
    """The dense plan of ``recipes`` (refusing what the index cannot hold yet)."""
    from poolkit.plan import make_plan

    for name, r in recipes.items():
        if r.level != "sequence":
            raise InputError(arg="recipe", expected="a sequence recipe (one dense vector per "
                             "text) for the index", got=f"{name} ({r.level})",
                             fix="Index dense recipes (mean, cls, mean/pca128, mean/256); "
                             "sparse and multi-vector indexes are not built yet.")  # fmt: skip
        if r.precision is not None:
            raise InputError(arg="recipe", expected="float32 vectors for the index (it scores "
                             "them by cosine, as compare does)", got=str(r),
                             fix=f"Index {r.replace(precision=None)}; int8 and binary as "
                             "Qdrant quantization are not built yet.")  # fmt: skip
    # Fits checked (against the recipes, their width, the model) wherever one is fitted.
    fitted = fits or any(r.transform for r in recipes.values())
    return make_plan(encoder, dict(recipes), prompt_name=prompt_name,
                     fits=fits if fitted else None)  # fmt: skip


def index_texts(
    target: str | os.PathLike[str],
    texts: Sequence[str],
    ids: Sequence[Any] | None = None,
    *,
    model: Any = None,
    recipe: Any = None,
    fit: Any = None,
    prompt_name: str | None = None,
    query_prompt_name: str | None = None,
    payloads: Sequence[Mapping[str, Any]] | None = None,
    part_size: int = 4096,
    max_length: int | None = None,
) -> IndexRecord:
    """Embed ``texts`` and upsert them into the Qdrant Edge index at ``target`` (created, or
    added to where it holds the same model and recipes); returns its record.

    Args:
        target: the index folder.
        texts: the documents.
        ids: each text's id (int or text, unique); None: its row number.
        model: as for :func:`poolkit.embed`.
        recipe: a recipe or a list of them (dense sequence recipes, float32, fitted ones
            with ``fit``); each a named vector (its name); None: the model's pooling.
        fit: the fits of fitted recipes, as :func:`poolkit.embed` takes them; each is copied
            into the index.
        prompt_name: the documents' prompt; ``query_prompt_name``: the queries' (recorded
            for :func:`search`; None: the model's default prompt).
        payloads: fields kept with each point (payload ``keep``).
        part_size: texts embedded and upserted at a time.
    """
    from poolkit.asked import resolve_recipes
    from poolkit.embedding import check_inputs, get_encoder
    from poolkit.fitted import load_fits
    from poolkit.index.edge import open_shard, upsert
    from poolkit.plan import fit_model
    from poolkit.prompts import resolve_prompt

    items = check_inputs(list(texts))
    if not isinstance(part_size, int) or isinstance(part_size, bool) or part_size < 1:
        raise InputError(arg="part_size", expected="a positive number of texts",
                         got=repr(part_size))  # fmt: skip
    if payloads is not None and len(payloads) != len(items):
        raise InputError(arg="payloads", expected=f"{len(items)} payloads, one per text",
                         got=f"{len(payloads)}")  # fmt: skip
    own_ids = list(range(len(items))) if ids is None else list(ids)
    if len(own_ids) != len(items) or len(set(map(str, own_ids))) != len(own_ids):
        raise InputError(arg="ids", expected=f"{len(items)} distinct ids, one per text",
                         got=f"{len(own_ids)} ids, {len(set(map(str, own_ids)))} distinct")  # fmt: skip
    encoder = get_encoder(model, max_length=max_length)
    wanted, _ = resolve_recipes(None, recipe)
    if wanted is None:
        wanted = {encoder.info.pooling: encoder.info.intended_recipe()}
    fits = load_fits(fit)
    folder = _folder(target)
    try:  # the queries' prompt is recorded now and used by search: checked now
        resolve_prompt(encoder.info, query_prompt_name, None)
    except InputError as e:
        raise e.but(arg="query_prompt_name") from None
    plan = _plan(encoder, wanted, fits, prompt_name)
    widths = {n: o.dims for n, o in plan.outputs().items()}
    record = IndexRecord(
        model=str(encoder.info.reference), model_digest=fit_model(encoder),
        vectors={n: {"recipe": str(r), "dims": widths[n]} for n, r in wanted.items()},
        fits={n: {"digest": f.digest(), "file": f"fits/{file_slug(n)}.safetensors"}
              for n, f in plan.fits.items()},
        prompt_name=prompt_name, query_prompt_name=query_prompt_name,
        max_length=max_length, poolkit=_version(),
    )  # fmt: skip
    old = IndexRecord.read(folder)
    if old is not None:
        old.same_as(record, folder)
        if ids is None:  # row numbers 0, 1, ... would replace the points already there
            raise InputError(arg="ids", expected="the texts' own ids to add them to an "
                             f"existing index ({folder})", got="none (row numbers, which "
                             "would replace its points)", fix="Pass ids (--id-column), or "
                             "index into a new folder.")  # fmt: skip
    elif folder.exists() and any(folder.iterdir()):
        raise InputError(where=folder, expected="a new folder or a poolkit index",
                         got="a folder with other files", fix="Choose another --to.")  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    for name, f in plan.fits.items():
        f.save(folder / record.fits[name]["file"])
    record.write(folder)  # before any point: a rerun checks against it
    shard = open_shard(folder / "shard", widths)
    try:
        for lo in range(0, len(items), part_size):
            vectors, _ = plan.run(encoder, items[lo : lo + part_size])
            part = own_ids[lo : lo + part_size]
            kept = None if payloads is None else list(payloads[lo : lo + part_size])
            upsert(shard, part, vectors, kept)
        shard.flush()
    finally:
        shard.close()
    return record


def search(
    target: str | os.PathLike[str],
    queries: Sequence[str],
    *,
    using: str | None = None,
    k: int = 10,
    exact: bool = True,
) -> list[list[tuple[Any, float]]]:
    """The ``k`` nearest ids of each query in the index at ``target``, with their cosine
    scores, best first: the queries embedded as the index recorded (its model, query
    prompt, the vector ``using``'s recipe and fit; ``using`` may be left out when the index
    holds one vector). ``exact``: exact search (compare's ranking); else Qdrant's HNSW."""
    from poolkit.embedding import check_inputs, get_encoder
    from poolkit.fitted import load_fit
    from poolkit.index.edge import load_shard, nearest
    from poolkit.plan import fit_model
    from poolkit.recipe import Recipe

    folder = _folder(target)
    record = IndexRecord.read(folder)
    if record is None:
        raise InputError(where=folder, expected="a poolkit index (poolkit-index.json)",
                         got="there is none", fix="Build one with poolkit index.")  # fmt: skip
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InputError(arg="k", expected="a positive number of results", got=repr(k))
    name = using if using is not None else next(iter(record.vectors))
    if using is None and len(record.vectors) > 1:
        raise InputError(arg="using", expected=f"one of the index's vectors "
                         f"({', '.join(record.vectors)})", got="none",
                         fix="Name the vector to search.")  # fmt: skip
    if name not in record.vectors:
        raise InputError(arg="using", expected=f"one of {', '.join(record.vectors)}",
                         got=repr(name))  # fmt: skip
    recipe = Recipe.parse(record.vectors[name]["recipe"])
    encoder = get_encoder(record.model, max_length=record.max_length)
    if fit_model(encoder) != record.model_digest:
        raise InputError(where=folder, expected=f"the model it was built with ({record.model}, "
                         f"digest {short_digest(record.model_digest)})",
                         got="the files at that path differ now",
                         fix="Search with the model the index was built with.")  # fmt: skip
    fits = {}
    if name in record.fits:  # the fit the index was built with, not another one put there
        fits = {name: load_fit(folder / record.fits[name]["file"])}
        if fits[name].digest() != record.fits[name]["digest"]:
            raise InputError(where=folder / record.fits[name]["file"], expected="the fit the "
                             "index was built with", got="another file",
                             fix="Restore the index's fits/ folder, or index again.")  # fmt: skip
    plan = _plan(encoder, {name: recipe}, fits, record.query_prompt_name)
    vectors, _ = plan.run(encoder, check_inputs(list(queries)))
    shard = load_shard(folder / "shard")
    try:
        return nearest(shard, name, vectors[name], k, exact)
    finally:
        shard.close()


def _version() -> str:
    from poolkit._version import __version__

    return __version__
