"""`fleetbench --help`: every subcommand once, one line each, in the groups of the README's
Commands table (fleetbench/cli.py GROUPS)."""
import importlib
import re
import subprocess
import sys

from util import REPO, env

from fleetbench import cli


def test_help_lists_every_subcommand_once_under_its_group():
    proc = subprocess.run([sys.executable, "-m", "fleetbench", "--help"], cwd=REPO, env=env(), capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""
    heads = re.findall(r"^([a-z]+): ", proc.stdout, re.M)[1:]  # after the usage line
    assert heads == [group for group, _, _ in cli.GROUPS] == list(readme_groups())
    listed = re.findall(r"^  ([a-z0-9]+) +\S", proc.stdout, re.M)
    assert sorted(listed) == sorted(cli.SUBCOMMANDS) and len(listed) == len(set(listed)) == len(cli.SUBCOMMANDS)
    # each under its own group's heading, in the group's order
    blocks = {head: re.findall(r"^  ([a-z0-9]+) ", block, re.M)
              for head, block in re.findall(r"^([a-z]+): [^\n]*\n((?:  [^\n]*\n?)+)", proc.stdout, re.M) if head != "usage"}
    assert blocks == {group: list(members) for group, _, members in cli.GROUPS}
    assert all(len(line) <= 110 for line in proc.stdout.splitlines())  # one line each, a terminal's width


def readme_groups() -> dict:
    """{group: [subcommand, ...]} of the README's Commands table: its rows' first cells, and the
    subcommands each row links (the first backquoted word of each link)."""
    text = (REPO / "README.md").read_text().split("## Commands", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ", 1) for line in text.splitlines() if line.startswith("| ") and not line.startswith("|--")]
    return {head[2:]: [name for names in re.findall(r"\[`([^\]]+)`\]", rest) for name in names.split("`, `")]
            for head, rest in rows[1:]}


def test_the_help_groups_are_the_readmes_commands_table():
    assert readme_groups() == {group: list(members) for group, _, members in cli.GROUPS}


def test_every_grouped_subcommand_is_a_module_with_a_cli():
    for name, (module, text) in cli.SUBCOMMANDS.items():
        assert callable(getattr(importlib.import_module(module), "cli")) and text and "\n" not in text, name
