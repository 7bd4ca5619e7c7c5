"""Every dotted `fleetbench.…` path written anywhere in the repository (code, strings handed to a
subprocess, docs) names a module that exists, and a name that module defines: a moved module must
not leave a bench script or a doc pointing at its old room (bench/netem_link.py ran
`fleetbench.measure.linkprobe` in a subprocess string for a whole round after it moved to comm/)."""
import ast
import re
from functools import lru_cache
from pathlib import Path

import pytest

from util import REPO

DOTTED = re.compile(r"(?<![\w/.])fleetbench(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
# Dotted names that are not module paths: a logger's name.
NOT_MODULES = {"fleetbench.mllog"}
WHERE = ["bench", "tools", "collective", "parameter_server", "datasets", "fleetbench", "tests", "docs",
         "results/reference"]


def sources() -> list[Path]:
    files = [REPO / "README.md", REPO / "Makefile"]
    for folder in WHERE:
        files += sorted(p for p in (REPO / folder).rglob("*") if p.suffix in (".py", ".md", ".sh", ".yaml"))
    return [f for f in files if f != Path(__file__).resolve()]  # this file names stale paths on purpose


@lru_cache(maxsize=None)
def defined(path: Path) -> frozenset:
    """Top-level names a module defines or imports."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return frozenset(names)


def problem(dotted: str) -> str | None:
    """Why `dotted` names nothing, or None."""
    parts = dotted.split(".")
    path = REPO / parts[0]
    for i, part in enumerate(parts[1:], start=1):
        if (path / part).is_dir() and (path / part / "__init__.py").exists():
            path = path / part
            continue
        if (path / f"{part}.py").exists():
            module = path / f"{part}.py"
            rest = parts[i + 1:]
            return None if not rest or rest[0] in defined(module) else f"{'.'.join(parts[:i + 1])} has no {rest[0]}"
        init = path / "__init__.py"
        return None if part in defined(init) else f"no module {'.'.join(parts[:i + 1])}"
    return None


def test_every_dotted_fleetbench_path_names_something():
    bad = []
    for path in sources():
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            for match in DOTTED.finditer(line):
                dotted = match.group(0).rstrip(".")
                why = None if dotted in NOT_MODULES else problem(dotted)
                if why:
                    bad.append(f"{path.relative_to(REPO)}:{number}: {dotted}: {why}")
    assert bad == []


@pytest.mark.parametrize("dotted, ok", [("fleetbench.comm.linkprobe", True), ("fleetbench.measure.linkprobe", False),
                                        ("fleetbench.store.results.check_appendable", True),
                                        ("fleetbench.store.results.aggregate", False)])
def test_the_check_tells_a_moved_module(dotted, ok):
    assert (problem(dotted) is None) == ok
