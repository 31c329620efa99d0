"""``poolkit embed`` with one multi-vector recipe: its flags checked, and each part's vectors
(token vectors committed as rows of one token each, so ``--resume`` works; MUVERA: one
vector per text). The side is ``--prompt-name query`` or ``document`` (the default).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import numpy as np

from poolkit.errors import InputError

__all__ = ["MultivectorPart", "check_multivector_args"]


def _refuse(flag: str, recipe: str, fix: str) -> Any:
    raise InputError(expected=f"no {flag} with the multi-vector recipe {recipe!r}",
                     got="it is given", fix=fix)  # fmt: skip


def check_multivector_args(args: argparse.Namespace, wanted: dict[str, Any] | None) -> bool:
    """Whether the job's recipe is multi-vector; its dense-only flags refused in one line
    each, before any model loads (a ragged output's format is checked with the output)."""
    recipes = list((wanted or {}).values())
    multi = [r for r in recipes if r.level == "multivector"]
    if not multi:
        if args.token_offsets:
            raise InputError(arg="--token-offsets", expected="given with a multi-vector recipe "
                             "(multivector:tokens)", got="a dense or sparse recipe, one vector "
                             "per text", fix="Drop it.")  # fmt: skip
        return False
    name = str(multi[0])
    if len(recipes) > 1:
        raise InputError(arg="--recipe", expected=f"a multi-vector recipe ({name}) alone",
                         got=f"{len(recipes)} recipes", fix="Run one job each.")  # fmt: skip
    dense_only = (
        ("--exclude-special", args.exclude_special, "the folder says which tokens count"),
        ("--pooled-only", args.pooled_only, "token vectors always go through the folder's "
         "projection (a plain encoder has none)"),
        ("--chunks", args.chunks is not None, "embed documents whole (late interaction "
         "scores every token)"),
        ("--long-text window", args.long_text == "window", "the folder's document length "
         "cuts long texts"),
        ("--ranges", getattr(args, "ranges", None) is not None, "int8/uint8 ranges are for "
         "dense recipes"),
        ("-o -", args.output == "-", "write a .jsonl, .npz or .parquet file"),
    )  # fmt: skip
    for flag, given, fix in dense_only:
        if given:
            _refuse(flag, name, fix + ".")
    if args.token_offsets:
        _check_token_offsets(args, multi[0])
    return True


def _check_token_offsets(args: argparse.Namespace, recipe: Any) -> None:
    """``--token-offsets`` needs one vector per token and a Parquet or JSON Lines output."""
    if recipe.pool_factor is not None:
        _refuse("--token-offsets", str(recipe), "a pooled vector is the mean of merged tokens, "
                "which have no one span: drop /pool or --token-offsets.")  # fmt: skip
    if recipe.muvera is not None:
        _refuse("--token-offsets", str(recipe), "MUVERA writes one vector per text: drop "
                "--token-offsets.")  # fmt: skip
    if getattr(args, "engine", None) == "ray":
        raise InputError(expected="no --token-offsets on --engine ray (its shards hold the "
                         "token vectors only)", got="it is given",
                         fix="Run without --engine ray.")  # fmt: skip
    if str(args.output).lower().endswith(".npz"):
        _refuse("--token-offsets", str(recipe), "the .npz output has no place for them: write "
                ".parquet or .jsonl.")  # fmt: skip


class MultivectorPart:
    """What a multi-vector job needs from its model: the side, its prompt, and each part's
    vectors as the job's sink takes them."""

    def __init__(self, args: argparse.Namespace, encoder: Any, recipes: dict[str, Any]) -> None:
        from poolkit.families import family_plan
        from poolkit.multivector.encode import late_interaction, side_length

        self.encoder = encoder
        self.recipe = recipe = next(iter(recipes.values()))
        self.late = late_interaction(encoder)
        try:  # the job's one resolution: the side, its prompt, the width checked
            self.plan = family_plan(encoder, recipes, prompt_name=args.prompt_name,
                                    prompt=args.prompt)  # fmt: skip
        except InputError as e:
            from poolkit.cli._flags import MULTIVECTOR, flagged

            raise flagged(e, MULTIVECTOR) from None
        self.side, self.prompt = self.plan.side, self.plan.prompt
        self.normalize = recipe.resolved_normalize(self.late.normalize)
        self.max_length = side_length(self.late, self.side, encoder.max_length)
        self.ragged = recipe.kind == "multivector"
        self.offsets = bool(args.token_offsets)

    def settings(self) -> dict[str, Any]:
        """What the vectors depend on beyond the common settings (for the manifest)."""
        return {"prompt": self.prompt, "side": self.side, "normalize": [self.normalize],
                "late_interaction": self.late.source,
                **({"token_offsets": True} if self.offsets else {})}  # fmt: skip

    def embed(
        self, name: str, texts: list[str], first: int, progress: Callable[[int], None]
    ) -> tuple[dict[str, np.ndarray], np.ndarray | None, dict[str, np.ndarray], Any]:
        """``(arrays, ids, columns, stats)`` of a part whose first text has id ``first``:
        ragged, one row per token (``ids`` each token's text; ``columns``: its ``offsets``
        ``(tokens, 2)`` with ``--token-offsets``, else none); MUVERA, one row per text
        (``ids`` None)."""
        from poolkit.multivector.encode import embed_multivector

        out, spans, stats = embed_multivector(texts, self.encoder, self.recipe, side=self.side,
                                              prompt=self.prompt, progress=progress,
                                              keep_offsets=self.offsets)  # fmt: skip
        if not self.ragged:
            return {name: np.stack(out)}, None, {}, stats
        empty = [first + i for i, v in enumerate(out) if not len(v)]
        if empty:
            raise InputError(where=f"text {empty[0]}", expected="a token vector kept",
                             got="none (blank, and the model adds no special token)",
                             fix="Remove it or give it text.")  # fmt: skip
        counts = [len(v) for v in out]
        ids = np.repeat(np.arange(first, first + len(texts), dtype=np.int64), counts)
        columns = {"offsets": np.concatenate(spans).astype(np.int64)} if self.offsets else {}
        return {name: np.concatenate(out)}, ids, columns, stats
