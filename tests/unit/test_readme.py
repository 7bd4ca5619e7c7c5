"""The README's limits: a newcomer reads it in five minutes. At most 12,000 characters with its
generated section, no prose sentence over 250 characters (code blocks and tables aside), the two
commands of a fresh machine first, the 8-GPU quick start within the first 60 lines, and each term
defined where it is first used. Its commands are run by tests/job/test_docs.py."""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
MAX_CHARS = 12_000
MAX_SENTENCE = 250
# a term and how the README defines it at its first use in prose (bold, or its expansion before it)
TERMS = {"Fleet": "**Fleet**", "FleetX": "**FleetX**", "rank": "**rank**", "world size": "**world size**",
         "preset": "**preset**", "method": "**method**", "cell": "**cell**", "GEO": "**GEO**",
         "MFU": "utilisation\n(MFU)"}


def prose(text: str) -> str:
    """The README as read: no code blocks, tables, headings, images or HTML comments; a link is its
    text, a code span its content."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    lines = [line for line in text.splitlines() if not line.lstrip().startswith(("|", "#", "!["))]
    text = "\n".join(lines)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return text.replace("`", "")


def sentences(text: str) -> list:
    """Sentences of each paragraph or list item, joined over line breaks: a full stop, `!` or `?`
    and a space end one (not in `e.g.`, `i.e.`; in a number or a file name no space follows), and a
    colon or semicolon before a capital."""
    out = []
    for block in re.split(r"\n\s*\n|\n(?=\s*- )", text):
        block = " ".join(block.split())
        out += [s for s in re.split(r"(?<!e\.g\.)(?<!i\.e\.)(?<=[.!?])\s+|(?<=[:;])\s+(?=[A-Z])", block) if s]
    return out


def test_the_readme_is_at_most_12000_characters_with_its_generated_section():
    assert "fleetbench:results:begin" in README
    assert len(README) <= MAX_CHARS, f"README.md is {len(README)} characters (at most {MAX_CHARS})"


def test_no_prose_sentence_is_longer_than_250_characters():
    found = sentences(prose(README))
    assert len(found) >= 40, f"only {len(found)} sentences found: the extraction is broken"
    long = [s for s in found if len(s) > MAX_SENTENCE]
    assert not long, "\n".join(f"{len(s)}: {s}" for s in long)


def test_the_fresh_machine_commands_come_first_and_the_gpu_quick_start_within_60_lines():
    lines = README.splitlines()
    first_block = README.split("```", 2)[1].strip().splitlines()
    assert [line.split("#")[0].strip() for line in first_block] == ["make demo", "make test"]
    gpu = [i for i, line in enumerate(lines, start=1) if "fleetbench launch --gpus 0-7" in line]
    assert gpu and gpu[0] <= 60, f"the 8-GPU quick start's launch is at line {gpu[:1]}, not within the first 60"
    assert lines.index("## Quick start") < gpu[0]


@pytest.mark.parametrize("term", TERMS)
def test_each_term_is_defined_at_its_first_use(term):
    text = prose(README)
    first = re.search(rf"(?<![\w-]){re.escape(term)}(?![\w-])", text.replace("**", ""))
    definition = text.replace("**", "").find(TERMS[term].replace("**", ""))
    assert definition >= 0, f"{term!r}: its definition {TERMS[term]!r} is not in the README"
    assert TERMS[term] in text and first.start() >= definition, \
        f"{term!r} is used before it is defined: ...{text.replace('**', '')[max(0, first.start() - 80):first.end()]}"


def test_the_sentence_splitter_splits_where_a_reader_would():
    assert sentences("One, e.g. this. Two is `x.py`; three (here). Four 1.5 GB\nfive. `make` six.\n\n- Seven: Eight") == \
        ["One, e.g. this.", "Two is `x.py`; three (here).", "Four 1.5 GB five.", "`make` six.", "- Seven:", "Eight"]


def test_the_commands_table_names_every_subcommand_once_each_linked():
    from fleetbench.cli import SUBCOMMANDS

    table = README.split("## Commands", 1)[1].split("\n\n", 2)[1]
    named = re.findall(r"\[`([a-z0-9]+)`(?:, `([a-z0-9]+)`)?\]\(docs/", table)
    names = [n for pair in named for n in pair if n]
    assert sorted(names) == sorted(SUBCOMMANDS), f"README's Commands table: {names}"
