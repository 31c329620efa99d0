"""Where an exported recipe came from, and the model card that says it.

:func:`read_compare` takes the top row of a ``poolkit compare --json`` file;
:func:`choice_text` and :func:`model_card` turn the record into prose for README.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from poolkit._errors import value_error
from poolkit.bm25 import parse_bm25
from poolkit.errors import InputError
from poolkit.recipe import Recipe

__all__ = ["choice_text", "fit_text", "model_card", "read_compare"]


def _bad(path: Path, *, which: str) -> InputError:
    """``from_compare`` refused: the file at ``path`` ``which`` ("does not exist")."""
    return InputError(arg="from_compare", expected="a `poolkit compare --json` file",
                      got=f"{str(path)!r}, which {which}",
                      fix="Write one with: poolkit compare ... --json results.json")  # fmt: skip


def read_compare(path: str | Path, source: Path) -> tuple[Recipe, dict[str, Any]]:
    """The top row of the compare JSON at ``path`` as a recipe, and the record of the choice
    (with a fitted row's ``fit`` entry: what it was fitted on, and its file).

    ``source``: the resolved folder of the model being exported; the file must have
    compared that model. Raises :class:`InputError` naming the file otherwise.
    """
    from poolkit.model_folder import resolve_model

    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _bad(path, which="does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _bad(path, which=f"cannot be read as JSON ({type(e).__name__})") from None
    rows = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows or not isinstance(rows[0], dict):
        raise _bad(path, which="has no rows under `results`")
    # A document row (window, naive or late chunks) is a way to cut a corpus, a BM25 row
    # needs no model and a hybrid row (``sides``) is two rows, so no model folder carries
    # any of them: the top row a folder can hold is the choice.
    rank, top = next(((k, r) for k, r in enumerate(rows, 1) if isinstance(r, dict)
                      and not r.get("documents") and not _is_bm25(r) and not r.get("sides")),
                     (1, rows[0]))  # fmt: skip
    above = rows[: rank - 1]
    try:
        recipe = Recipe.parse(top["recipe"])
    except (KeyError, TypeError, ValueError):
        raise _bad(
            path, which=f"has a top row without a valid `recipe` ({top.get('recipe')!r})"
        ) from None
    compared = doc.get("model")
    try:
        same = resolve_model(compared) == source
    except (TypeError, ValueError):
        same = False
    if not same:
        value_error(
            "from_compare",
            f"results for the model being exported ({str(source)!r})",
            f"{str(path)!r}, which compared {compared!r}",
            "Export that model, or run poolkit compare on this one.",
        )
    metric = doc.get("metric")
    intended = next((r for r in rows if r.get("intended")), None)
    choice = {
        "by": "poolkit compare",
        "file": path.name,
        "task": doc.get("task"),
        "metric": metric,
        "rank": rank,
        "above": _above(above),
        "rows": len(rows),
        "recipe": top["recipe"],
        "value": top.get(metric),
        "ci": (top.get("ci") or {}).get(metric),
        "backend": top.get("backend"),
        "quantize": top.get("quantize"),
        "intended_recipe": intended.get("recipe") if intended else None,
        "intended_value": intended.get(metric) if intended else None,
        "difference": top.get("difference"),
        "significant": top.get("significant"),
        "tied": top.get("tied"),
    }
    if isinstance(top.get("fit"), dict):  # only then: other rows' choices stay as they were
        choice["fit"] = top["fit"]
    return recipe, choice


def _is_bm25(row: dict[str, Any]) -> bool:
    try:
        return parse_bm25(row.get("recipe")) is not None
    except ValueError:  # a BM25 name with bad settings is still BM25's
        return True


def _above(rows: list[Any]) -> str | None:
    """Why the rows above the exported one are not it, in words (``None``: no row)."""
    why = []
    if any(isinstance(r, dict) and r.get("documents") for r in rows):
        why.append("cut documents into chunks or windows")
    if any(isinstance(r, dict) and _is_bm25(r) for r in rows):
        why.append("are BM25, which has no model")
    return " or ".join(why) or None


def _num(x: Any) -> str:
    return f"{x:.4f}" if isinstance(x, int | float) else str(x)


def choice_text(choice: dict[str, Any]) -> str:
    """One sentence: where the exported recipe came from."""
    by = choice.get("by")
    if by == "poolkit compare":
        ci = choice.get("ci")
        interval = f" (95% CI {_num(ci[0])} to {_num(ci[1])})" if isinstance(ci, list) else ""
        rank = choice.get("rank", 1)
        above = choice.get("above") or "cut documents into chunks or windows"
        which = "the top row" if rank == 1 else (
            f"row {rank}, the best a model folder holds (the rows above it {above}),")  # fmt: skip
        text = (
            f"chosen by `poolkit compare --task {choice['task']}` ({choice['file']}): {which} "
            f"of {choice['rows']}, {choice['metric']} {_num(choice['value'])}{interval}"
        )
        if choice.get("quantize"):
            text += f" (an {choice['quantize']} row)"
        if isinstance(choice.get("fit"), dict) and choice["fit"].get("on"):
            text += f" ({choice['fit']['on']})"
        if choice.get("tied"):
            text += ", tied with another row"
        if choice.get("intended_recipe") and choice["intended_recipe"] != choice["recipe"]:
            text += (
                f"; the model's intended pooling ({choice['intended_recipe']}) scored "
                f"{_num(choice['intended_value'])}"
            )
            diff = choice.get("difference")
            if isinstance(diff, dict):
                dci = diff.get("ci") or [None, None]
                text += f", difference {diff.get('value'):+.4f} [{_num(dci[0])}, {_num(dci[1])}]"
            if choice.get("significant") is not None:
                text += f", significant: {'yes' if choice['significant'] else 'no'}"
        elif choice.get("intended_recipe") == choice["recipe"]:
            text += "; it is the model's intended pooling"
        return text
    if by == "recipe":
        return "given with --recipe"
    return f"the model's intended pooling ({choice.get('source', 'as the model states it')})"


def fit_text(fit: dict[str, Any]) -> str:
    """One sentence: the fitted transform a folder carries (a record's ``fit`` entry)."""
    texts, source = fit.get("texts"), fit.get("source") or ""
    on = source if str(texts) in source else f"{texts} texts" + (f" ({source})" if source else "")
    digest = f" (texts digest {fit['texts_digest']})" if fit.get("texts_digest") else ""
    model = f"; model digest {fit['model']}" if fit.get("model") else ""
    return (
        f"`/{fit['transform']}` ({fit['in_dim']} -> {fit['out_dim']} dimensions, after the "
        f"pooling and before any /DIMS), fitted for `{fit['recipe']}` on {on}{digest}{model}; "
        f"transform digest {fit['digest']}"
    )


def model_card(record: dict[str, Any], load: str) -> str:
    """README.md of an exported folder: the pooling it carries, where it came from, how to
    load it. ``record``: the folder's poolkit-export.json; ``load``: a Python snippet."""
    src = record["source"]
    lines = [
        f"# {record['recipe']} pooling of {src['model']}",
        "",
        f"Exported by poolkit {record['versions'].get('poolkit')} with `poolkit export` "
        f"({record['format']}).",
        "",
        f"- **Pooling**: `{record['recipe']}` ({record['description']}), "
        f"{record['output_dim']} dimensions, L2-normalised: "
        f"{'yes' if record['normalize'] else 'no'}.",
        f"- **Where the choice came from**: {choice_text(record['choice'])}.",
        f"- **Source model**: {src['model']} (its own pooling: {src['pooling']}, from "
        f"{src['pooling_source']}).",
    ]
    fit = record.get("fit")
    if fit:
        lines.append(f"- **Fitted transform**: {fit_text(fit)}.")
    agreement = record.get("agreement")
    if agreement:
        lines.append(f"- **Checked at export**: {agreement['summary']}.")
    lines += ["", "## Load it", "", "```python", load.strip(), "```", ""]
    return "\n".join(lines)
