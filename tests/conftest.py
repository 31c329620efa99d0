"""Shared test settings and fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))

settings.register_profile(
    "poolkit",
    max_examples=int(os.environ.get("POOLKIT_HYPOTHESIS_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
settings.load_profile("poolkit")

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
