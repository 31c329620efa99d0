"""The order the test files run in: conftest's HEAVIEST_FIRST names files that exist (a
renamed heavy file would otherwise quietly go last, where it runs alone), and pytest
collects them first, heaviest first, the rest after in their usual order."""

from __future__ import annotations

from pathlib import Path

from conftest import HEAVIEST_FIRST

TESTS = Path(__file__).parent


def test_heaviest_first_names_existing_test_files_once():
    assert len(set(HEAVIEST_FIRST)) == len(HEAVIEST_FIRST)
    missing = [name for name in HEAVIEST_FIRST if not (TESTS / name).is_file()]
    assert not missing, f"conftest.HEAVIEST_FIRST names files that do not exist: {missing}"


def test_this_session_runs_the_heaviest_files_first(request):
    files: list[str] = []
    for item in request.session.items:
        if item.path.name not in files:
            files.append(item.path.name)
    heavy = [name for name in HEAVIEST_FIRST if name in files]
    assert files[: len(heavy)] == heavy
    rest = files[len(heavy) :]
    assert rest == sorted(rest)  # pytest's own order: by path
