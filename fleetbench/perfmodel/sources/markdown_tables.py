"""Pipe tables of a Markdown page (GitHub's `| a | b |` form), each with the paragraph line above it
(its caption), for the converters of published tables; and the writer of a hybrid-parallel table
file (fleetbench/presets/published/*.yaml) from converted cells."""
from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import yaml


@dataclasses.dataclass(frozen=True)
class MdTable:
    caption: str             # the last non-empty, non-table line above the table
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


def _cells(line: str) -> tuple[str, ...]:
    return tuple(c.strip() for c in line.strip().strip("|").split("|"))


def tables(text: str) -> list[MdTable]:
    """Every pipe table in page order; a row shorter than the header is padded with empty cells."""
    out, caption, lines, i = [], "", text.splitlines(), 0
    while i < len(lines):
        line = lines[i].strip()
        rule = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if line.startswith("|") and re.fullmatch(r"\|?[\s:|-]+\|?", rule) and "-" in rule:
            header, rows, i = _cells(line), [], i + 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                row = _cells(lines[i])
                rows.append(row + ("",) * (len(header) - len(row)))
                i += 1
            out.append(MdTable(caption, header, tuple(rows)))
            continue
        if line:
            caption = line
        i += 1
    return out


def number(text: str) -> float | None:
    """A printed figure ('5,762', '29.0%', '76/80') as a float (the part before a slash); None if none."""
    found = re.search(r"-?\d[\d,]*(?:\.\d+)?", text)
    return None if found is None else float(found.group(0).replace(",", ""))


def table_yaml(comment: str, meta: dict, cells: list[dict]) -> str:
    """A hybrid table file: the comment (the source and how it was read), `meta` (source, url, flops,
    unit, cluster, assumed, ...), then the cells with every key that one value holds in all cells
    moved into `defaults`, the rest as `columns` and `rows` (in the cells' key order)."""
    keys = list(dict.fromkeys(k for c in cells for k in c))
    constant = {k: cells[0].get(k) for k in keys
                if k not in ("name", "published") and all(k in c and c[k] == cells[0][k] for c in cells)}
    columns = [k for k in keys if k not in constant]
    body = dict(meta, defaults=constant, columns=columns, rows=[[c.get(k) for k in columns] for c in cells])
    head = "".join(f"# {line}".rstrip() + "\n" for line in comment.strip().splitlines())
    return head + yaml.safe_dump(body, sort_keys=False, width=200, default_flow_style=None, allow_unicode=True)


def main(module: str, sources: Iterable[str], convert: Callable[[str, str], str], argv: list[str] | None) -> int:
    """A converter's command line: `python -m MODULE KEY FILE` writes KEY's table of the page FILE."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in sources:
        print(f"usage: python -m {module} {{{'|'.join(sources)}}} FILE", file=sys.stderr)
        return 2
    sys.stdout.write(convert(args[0], Path(args[1]).read_text()))
    return 0
