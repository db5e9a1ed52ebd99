"""The CLI synopsis in docs/production.md names every command and each command's own options."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from idempotent_lambda.cli._main import build_parser

PAGE = Path(__file__).resolve().parents[2] / "docs/production.md"
#: Options every table command takes, told once under the synopsis ("Common options").
SHARED_GROUPS = {"connection", "item layout"}
COMMAND = re.compile(r"^[a-z][a-z-]*$")


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Yield each leaf command's words and its parser."""
    found = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not found:
        yield path, parser
        return
    for name, child in found[0].choices.items():
        yield from commands(child, (*path, name))


def own_options(parser: argparse.ArgumentParser) -> set[str]:
    """Return a command's options and positionals, as the synopsis writes them."""
    shared = {
        id(action)
        for group in parser._action_groups
        if group.title in SHARED_GROUPS
        for action in group._group_actions
    }
    names: set[str] = set()
    for action in parser._actions:
        if id(action) in shared or action.help == argparse.SUPPRESS:
            continue
        if isinstance(action, argparse._HelpAction) or "--json" in action.option_strings:
            continue
        long = [option for option in action.option_strings if option.startswith("--")]
        names.add(long[0] if long else str(action.metavar or action.dest))
    return names


def synopsis() -> dict[tuple[str, ...], str]:
    """Return the synopsis block's text for each command it lists."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("## The operator CLI")
    block = text[
        text.index("```\n", start) + 4 : text.index("```\n", text.index("```\n", start) + 4)
    ]
    lines: dict[tuple[str, ...], str] = {}
    current: tuple[str, ...] = ()
    for line in block.splitlines():
        if line.startswith("idempotent-lambda "):
            words = line.split()[1:]
            count = next((i for i, w in enumerate(words) if not COMMAND.match(w)), len(words))
            current = tuple(words[:count])
            lines[current] = line
        else:
            lines[current] += "\n" + line
    return lines


def test_the_synopsis_lists_every_command_and_its_options() -> None:
    """A command or option the CLI has and the synopsis lacks is named here."""
    shown = synopsis()
    missing = {}
    for path, parser in commands(build_parser()):
        text = shown.get(path, "")
        absent = sorted(name for name in own_options(parser) if name not in text)
        if not text or absent:
            missing[" ".join(path)] = absent if text else "no line"
    assert {} == missing
