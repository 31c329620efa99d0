"""fastembed's MUVERA (``fastembed/postprocess/muvera.py``, numpy only) as a test reference,
read from the fastembed 0.9.1 wheel without installing fastembed (its pins clash with
transformers 5). The wheel is ``$POOLKIT_FASTEMBED_WHEEL`` (``.ci/run`` downloads it with
``pip download --no-deps fastembed==0.9.1`` and sets it), else the first
``fastembed-0.9.1-*.whl`` in ``/work/refs``. :func:`load_muvera` returns ``None``
without it (tests skip, saying why)."""

from __future__ import annotations

import os
import sys
import types
import zipfile
from pathlib import Path

import numpy as np

MODULE = "fastembed/postprocess/muvera.py"
WHEEL_GLOB = "fastembed-0.9.1-*.whl"
REFS = Path("/work/refs")


def wheel() -> Path | None:
    """The fastembed 0.9.1 wheel on this machine, or None."""
    named = os.environ.get("POOLKIT_FASTEMBED_WHEEL")
    if named:
        return Path(named) if Path(named).is_file() else None
    found = sorted(REFS.glob(WHEEL_GLOB)) if REFS.is_dir() else []
    return found[0] if found else None


def load_muvera() -> types.ModuleType | None:
    """fastembed's muvera module, its imports of fastembed's base classes stubbed (it uses
    them only in a type alias); None without the wheel."""
    path = wheel()
    if path is None:
        return None
    source = zipfile.ZipFile(path).read(MODULE).decode("utf-8")
    stubs = {
        "fastembed.common.types": {"NumpyArray": np.ndarray},
        "fastembed.late_interaction.late_interaction_embedding_base": {
            "LateInteractionTextEmbeddingBase": type("LateInteractionTextEmbeddingBase", (), {})
        },
        "fastembed.late_interaction_multimodal.late_interaction_multimodal_embedding_base": {
            "LateInteractionMultimodalEmbeddingBase": type("MultimodalBase", (), {})
        },
    }
    for name in list(stubs):  # the parent packages too, or the import looks for them
        parts = name.split(".")
        for k in range(1, len(parts)):
            stubs.setdefault(".".join(parts[:k]), {})
    saved = {name: sys.modules.get(name) for name in stubs}
    try:
        for name, attrs in stubs.items():
            stub = types.ModuleType(name)
            stub.__dict__.update(attrs)
            sys.modules[name] = stub
        module = types.ModuleType("fastembed_muvera")
        exec(compile(source, f"{path.name}/{MODULE}", "exec"), module.__dict__)
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    return module
