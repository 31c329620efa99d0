"""A family of outputs as a separate package, written to a folder as an installer leaves it
(the module, and a ``.dist-info`` whose ``entry_points.txt`` declares the
``poolkit.families`` group), so putting the folder on ``sys.path`` or ``PYTHONPATH``
installs it for ``importlib.metadata``.

``poolkit-hashbag`` 0.1 adds the level ``hashed`` (strategies ``ids`` and
``ids_no_special``) of the family ``hashbag``: a text's token ids counted into 64 buckets
(``id % 64``), L2-normalised: a hashed bag of the model's own sub-words, no forward pass.
It names nothing of poolkit's internals beyond the registries and the stats it returns.
"""

from __future__ import annotations

import sys
from pathlib import Path

HASHBAG = '''\
"""poolkit-hashbag: hashed bags of token ids as a poolkit family (group poolkit.families)."""

import time

import numpy as np
import pyarrow as pa

from poolkit.driver import EmbedStats
from poolkit.families import FloatOutputs, register_family
from poolkit.levels import Level, register_level
from poolkit.prompts import resolve_prompt

WIDTH = 64


class HashbagPlan(FloatOutputs):
    family = "hashbag"

    def __init__(self, recipes, prompt):
        self.recipes, self.prompt = dict(recipes), prompt

    def run(self, encoder, texts, *, long_text="truncate", max_batch_tokens=None,
            progress=None):
        start, out = time.perf_counter(), {}
        special = set(encoder.tokenizer.all_special_ids)
        ids = [encoder.tokenizer.encode((self.prompt or "") + t, special_tokens=True).ids
               for t in texts]
        for name, recipe in self.recipes.items():
            bags = np.zeros((len(texts), WIDTH), np.float32)
            for row, seq in enumerate(ids):
                for i in seq:
                    if not (recipe.strategy == "ids_no_special" and i in special):
                        bags[row, i % WIDTH] += 1
            norms = np.linalg.norm(bags, axis=1, keepdims=True)
            out[name] = bags / np.where(norms == 0, 1, norms)
        if progress is not None:
            progress(len(texts))
        stats = EmbedStats(num_texts=len(texts), num_tokens=sum(map(len, ids)),
                           seconds=time.perf_counter() - start,
                           dims={n: WIDTH for n in self.recipes})
        return out, stats

    def columns(self, vectors, widths):
        return [(n, pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), WIDTH))
                for n, v in vectors.items()]

    def record(self, widths):
        return {"family": "hashbag", "buckets": WIDTH}


def plan(encoder, recipes, *, prompt_name=None, prompt=None, pipeline="full",
         calibration=None):
    prompt = resolve_prompt(encoder.info, prompt_name, prompt)
    return HashbagPlan(recipes, prompt).with_ranges(calibration)


def register():
    register_level(Level(
        name="hashed", family="hashbag",
        canonical=lambda text, _: text if text in ("ids", "ids_no_special") else None,
        expected="ids or ids_no_special", names=("ids", "ids_no_special"),
        kind=lambda recipe: "dense", width=lambda recipe, hidden: WIDTH))
    register_family("hashbag", plan)
'''

DIST, VERSION, MODULE = "poolkit-hashbag", "0.1", "poolkit_hashbag"


def write_family(root: Path) -> Path:
    """poolkit-hashbag under ``root`` as installed (module + ``.dist-info``); returns
    ``root`` (the folder to put on the path)."""
    (root / f"{MODULE}.py").write_text(HASHBAG, encoding="utf-8")
    info = root / f"{MODULE}-{VERSION}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {DIST}\nVersion: {VERSION}\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        f"[poolkit.families]\nhashbag = {MODULE}:register\n", encoding="utf-8"
    )
    (info / "top_level.txt").write_text(f"{MODULE}\n", encoding="utf-8")
    return root


def forget_family() -> None:
    """poolkit loads family plugins once: unregister this one and let them load again."""
    from poolkit import families, levels

    levels._levels.pop("hashed", None)
    families._planners.pop("hashbag", None)
    levels._plugins_loaded = False
    sys.modules.pop(MODULE, None)
