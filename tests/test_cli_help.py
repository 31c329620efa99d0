"""Every flag of every ``poolkit`` command has a help line, shows its default, and the
default model is named the same way everywhere."""

from __future__ import annotations

import argparse

from clitools import run_cli

from poolkit.cli import build_parser
from poolkit.model_folder import DEFAULT_MODEL


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def test_every_subcommand_is_walked():
    assert set(_commands()) >= {"embed", "inspect", "tokens", "spans", "compare"}


def _old_spelling(parser: argparse.ArgumentParser, action: argparse.Action) -> bool:
    """A flag hidden from --help that sets what a listed flag of the command sets (same
    dest): an old spelling that keeps working (embed's --chunk-size, now --part-size)."""
    return action.help == argparse.SUPPRESS and any(
        other is not action and other.dest == action.dest
        and other.help not in (None, argparse.SUPPRESS)
        for other in _actions(parser)
    )  # fmt: skip


def test_every_flag_has_help():
    missing = [
        f"{name} {a.option_strings or a.dest}"
        for name, parser in _commands().items()
        for a in _actions(parser)
        if not _old_spelling(parser, a)
        and (not a.help or a.help == argparse.SUPPRESS or not a.help.strip())
    ]
    assert missing == []
    old = [
        a.option_strings for p in _commands().values() for a in _actions(p) if _old_spelling(p, a)
    ]
    # A new hidden flag is a choice: list it here.
    assert old == [["--chunk-size"], ["--strategies"]]


def test_defaults_are_shown():
    # A flag with a real default (not None, not an off switch) says what it is.
    hidden = [
        f"{name} {a.option_strings}: {a.default!r}"
        for name, parser in _commands().items()
        for a in _actions(parser)
        if a.default not in (None, False, argparse.SUPPRESS) and "default" not in (a.help or "")
    ]
    assert hidden == []


# `poolkit cache` manages files on disk and loads no model; `search`, the index's own
NO_MODEL = {"cache", "search"}


def test_the_default_model_is_named_one_way():
    helps = [
        a.help or ""
        for parser in _commands().values()
        for a in _actions(parser)
        if "--model" in a.option_strings or a.dest == "model"
    ]
    assert len(helps) == len(_commands()) - len(NO_MODEL)  # every command takes a model
    assert all(h.endswith(f"(default: {DEFAULT_MODEL})") for h in helps), helps


def test_the_model_flag_is_spelled_one_way():
    # Every command takes the model as --model/-m; a positional MODEL is an old spelling
    # (inspect, export).
    flagless = [
        name
        for name, parser in _commands().items()
        if name not in NO_MODEL
        and not any(a.option_strings[:2] == ["--model", "-m"] for a in _actions(parser))
    ]
    assert flagless == []


def test_help_prints_for_every_command():
    for name in _commands():
        result = run_cli([name, "--help"], cwd=".")
        assert result.returncode == 0 and b"usage: poolkit" in result.stdout, result.stderr
