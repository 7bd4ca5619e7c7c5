"""The package's shape, read from its source (docs/architecture.md): rooms import each other only
down the declared room order (so no room circle, no upward import; lazy imports count), no module
imports in a circle, measure/ is the paddle-free vocabulary; functions and positional parameter
lists stay small enough to read at once. Rooms and modules are as large as their concept: a room is
one concept, never split to meet a count; a module over NOTE_MODULE_LINES is named (a note, not a
failure) so that its opening comment says why it is one module."""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from util import REPO

PACKAGE = REPO / "fleetbench"
NOTE_MODULE_LINES, MAX_FUNCTION_LINES, MAX_POSITIONAL = 600, 45, 7
# Rooms whose every function has its parameters and return annotated (the others as they are
# brought there)
ANNOTATED = ("fleetbench/train", "fleetbench/machine", "fleetbench/job", "fleetbench/hosts", "fleetbench/engines",
             "datasets")
ARCHITECTURE = REPO / "docs" / "architecture.md"
# Room edges the declared order forbids that the tree still has, each with the change that removes
# it (none now: hosts/ and diagnose/ imported engines/ until the Slurm allocation code moved into
# hosts/). The check fails once an edge here is gone from the tree, so the entry is dropped with it.
TEMPORARY = {}


def modules(tops=(PACKAGE, REPO / "datasets"), base: Path = REPO) -> dict:
    """{dotted name: path} of every module of the given top-level packages."""
    out = {}
    for top in tops:
        for path in sorted(top.rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _type_only(tree: ast.AST) -> set:
    """The import statements under `if TYPE_CHECKING:`, which never run."""
    found = set()
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in (getattr(test, "id", None), getattr(test, "attr", None)):
            found |= {id(inner) for stmt in node.body for inner in ast.walk(stmt)}
    return found


def imported(name: str, path: Path, known: dict, type_only: bool = True) -> set:
    """The known modules `name` imports, anywhere in its body (lazy imports count; imports for type
    hints only, under `if TYPE_CHECKING:`, count unless type_only is False)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    skip = set() if type_only else _type_only(tree)
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names}
    return {m for m in found if m in known and m != name}


def import_graph(known: dict, type_only: bool = True) -> dict:
    return {name: imported(name, path, known, type_only) for name, path in known.items()}


def room(module: str, package: str = "fleetbench") -> str:
    """A module's room: its subpackage of the package, the package root ("fleetbench"), "cli" (the
    command line: cli.py and __main__.py), or its own top-level package (datasets)."""
    parts = module.split(".")
    if parts[0] != package:
        return parts[0]
    if len(parts) == 1:
        return package
    return "cli" if parts[1] in ("cli", "__main__") else parts[1]


def declared_order(text: str) -> dict:
    """{room: what it may import} from the table under "## The room order" (docs/architecture.md):
    a room by name (`measure`), or one module of a room (`emulate/netem_plan`)."""
    section = text.split("## The room order", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)`[^|]*\| ([^|]*) \|", section, re.M)
    order = {name: set(re.findall(r"`([a-z_/]+)`", allowed)) for name, allowed in rows}
    for name, allowed in rows:
        if allowed.strip() == "every room":
            order[name] = set(order) - {name}
    return order


def _entry(module: str, package: str) -> str:
    """How the order names a module: fleetbench.emulate.netem_plan -> emulate/netem_plan."""
    parts = module.split(".")
    return "/".join(parts[1:] if parts[0] == package and len(parts) > 1 else parts)


def _rooms_of(entries) -> set:
    return {e.split("/")[0] for e in entries}


def _below(order: dict, name: str) -> set:
    """Every room `name` may reach down the declared order."""
    seen, todo = set(), list(_rooms_of(order.get(name, ())))
    while todo:
        lower = todo.pop()
        if lower not in seen:
            seen.add(lower)
            todo.extend(_rooms_of(order.get(lower, ())))
    return seen


def _refused(graph: dict, order: dict, package: str) -> dict:
    """{(room, room it imports): [module -> module, ...]}: the imports between rooms the order does not allow."""
    refused = {}
    for source, targets in graph.items():
        for target in sorted(targets):
            pair, allowed = (room(source, package), room(target, package)), order.get(room(source, package), ())
            if pair[0] != pair[1] and pair[1] not in allowed and _entry(target, package) not in allowed:
                refused.setdefault(pair, []).append(f"{source} -> {target}")
    return refused


def _order_faults(graph: dict, order: dict, package: str) -> list:
    """A declared order that has a circle itself, names what the tree lacks, or leaves a room out."""
    rooms, entries = {room(m, package) for m in graph}, {_entry(m, package) for m in graph}
    named = set(order).union(*order.values())
    declared = {r: _rooms_of(e) for r, e in order.items()}
    found = [f"declared order: room circle {', '.join(c)}" for c in circles(declared)]
    found += [f"declared order: {n} is not in the tree" for n in sorted(named - rooms - entries)]
    return found + [f"{r}: a room the declared order leaves out" for r in sorted(rooms - set(order))]


def room_violations(graph: dict, order: dict, temporary: dict = None, package: str = "fleetbench") -> list:
    """What breaks the declared room order: a fault of the order itself, an upward or undeclared
    import, a room circle, an exception the tree no longer needs."""
    temporary = temporary or {}
    found = _order_faults(graph, order, package)
    for (source, target), where in sorted(_refused(graph, order, package).items()):
        if (source, target) in temporary:
            continue
        modules_only = sorted(e for e in order.get(source, ()) if e.startswith(f"{target}/"))
        kind = "upward" if source in _below(order, target) else \
            f"beyond the declared {', '.join(modules_only)}" if modules_only else "sideways (not declared)"
        found.append(f"{source} imports {target}, {kind}: {'; '.join(where)}")
    edges = {(room(s, package), room(t, package)) for s, targets in graph.items() for t in targets}
    kept = {}
    for s, t in edges - set(temporary):
        if s != t:
            kept.setdefault(s, set()).add(t)
    found += [f"room circle: {', '.join(c)}" for c in circles(kept)]
    stale = [pair for pair in temporary if pair not in edges]
    return found + [f"stale exception {s} -> {t}: the tree no longer has it" for s, t in stale]


def circles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while not component or component[-1] != v:
                component.append(stack.pop())
                on_stack.discard(component[-1])
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_circle():
    """Imports that run make no circle; an import for type hints only (under `if TYPE_CHECKING:`)
    never runs, so it may point back (methods.py names loop's Context). The room order counts it."""
    assert circles(import_graph(modules(), type_only=False)) == []


def test_rooms_import_only_down_the_declared_order():
    order = declared_order(ARCHITECTURE.read_text())
    assert {"measure", "store", "fleetbench", "cli", "datasets", "train", "hosts"} <= set(order)
    assert room_violations(import_graph(modules()), order, TEMPORARY) == []


def test_the_room_checker_reports_an_upward_import_a_room_circle_and_a_sideways_one(tmp_path):
    """A small tree built to break the order: measure imports train lazily (upward, and a room
    circle with train's import of measure); comm imports train, its sibling (sideways)."""
    files = {"pkg/__init__.py": "from pkg.measure import contract\n",
             "pkg/measure/__init__.py": "", "pkg/measure/contract.py": "X = 1\n",
             "pkg/measure/metrics.py": "def standard():\n    from pkg.train import loop  # lazy\n    return loop\n",
             "pkg/train/__init__.py": "", "pkg/train/loop.py": "from pkg.measure import metrics\n",
             "pkg/comm/__init__.py": "", "pkg/comm/collectives.py": "from ..train.loop import *\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(modules((tmp_path / "pkg",), tmp_path))
    order = {"measure": set(), "pkg": {"measure"}, "train": {"measure", "pkg"}, "comm": {"measure", "pkg"}}
    found = room_violations(graph, order, package="pkg")
    assert found == ["comm imports train, sideways (not declared): pkg.comm.collectives -> pkg.train.loop",
                     "measure imports train, upward: pkg.measure.metrics -> pkg.train.loop",
                     "room circle: measure, train"]
    assert room_violations(graph, dict(order, measure={"train"}), package="pkg")[0] == \
        "declared order: room circle measure, pkg, train"
    assert room_violations(graph, {k: v for k, v in order.items() if k != "comm"}, package="pkg")[0] == \
        "comm: a room the declared order leaves out"
    only_contract = dict(order, comm={"measure/contract", "pkg"}, train={"measure/contract", "pkg"})
    assert room_violations(graph, only_contract, package="pkg")[1] == \
        "measure imports train, upward: pkg.measure.metrics -> pkg.train.loop"
    assert room_violations(graph, only_contract, package="pkg")[2] == \
        "train imports measure, beyond the declared measure/contract: pkg.train.loop -> pkg.measure.metrics"
    kept = room_violations(graph, order, {("measure", "train"): "why", ("comm", "measure"): "gone"}, "pkg")
    assert kept == ["comm imports train, sideways (not declared): pkg.comm.collectives -> pkg.train.loop",
                    "stale exception comm -> measure: the tree no longer has it"]


def test_an_import_for_type_hints_only_counts_for_rooms_not_for_module_circles(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/__init__.py").write_text("")
    (tmp_path / "pkg/a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import b\n")
    (tmp_path / "pkg/b.py").write_text("import typing\nfrom pkg import a\nif typing.TYPE_CHECKING:\n    import pkg.c\n")
    (tmp_path / "pkg/c.py").write_text("from pkg import b\n")
    known = modules((tmp_path / "pkg",), tmp_path)
    assert circles(import_graph(known)) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert circles(import_graph(known, type_only=False)) == []


def test_the_declared_order_is_read_from_the_architecture_table():
    text = "## The room order\n\n| room | may import |\n|---|---|\n| `cli` (x.py) | every room |\n" \
           "| `train` | `measure`, `fleetbench/x` |\n| `measure` | — |\n\n## Next\n| `other` | `measure` |\n"
    assert declared_order(text) == {"cli": {"train", "measure"}, "train": {"measure", "fleetbench/x"},
                                    "measure": set()}


def test_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_measure_and_the_store_import_no_paddle():
    offenders = []
    for path in sorted([*(PACKAGE / "measure").rglob("*.py"), *(PACKAGE / "store").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(REPO)}:{node.lineno}" for n in names if n.split(".")[0] == "paddle"]
    assert offenders == []


# The rank side: the processes inside a Paddle job. Of the store they import only the JSONL writer
# and the schema; a database driver in a rank would be loaded by every rank of every job.
RANK_SIDE = ("train", "comm", "job")
DATABASE_DRIVERS = ("sqlalchemy", "psycopg", "psycopg2")  # (the standard library's sqlite3 Paddle imports itself)


def test_the_rank_side_imports_no_database_driver():
    """Every module of train/, comm/ and job/ imported in one fresh interpreter (Paddle with them):
    what they load, directly or through any room below, holds no database driver and nothing of
    the store but its writer and schema."""
    # job/entry/ holds the script Paddle's launcher runs (it runs the rank wrapper when imported)
    names = sorted(m for m in modules((PACKAGE,)) if room(m) in RANK_SIDE and ".entry" not in m)
    code = (f"import importlib, sys\nfor name in {names!r}:\n    importlib.import_module(name)\n"
            "print('\\n'.join(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = done.stdout.split()
    assert "paddle" in loaded and "fleetbench.store.results" in loaded  # the walk did import the rank side
    assert [m for m in loaded if m.split(".")[0] in DATABASE_DRIVERS] == []
    assert [m for m in loaded if m.startswith("fleetbench.store.")] == ["fleetbench.store.results",
                                                                     "fleetbench.store.schema"]


def test_every_one_line_refusal_is_a_user_error():
    """An error class made of ValueError is a refusal of the input in one line; in every room that
    may import the command line's shared parts it derives from cmdline.UserError instead, so that a
    command catches the one type (cmdline.refusing) and any other exception stays a traceback."""
    order = declared_order(ARCHITECTURE.read_text())
    rooms = {name for name, allowed in order.items() if "cmdline" in allowed} | {"cmdline"}
    found = [f"{path.relative_to(REPO)}:{node.lineno} {node.name}" for name, path in modules().items()
             if room(name) in rooms for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.ClassDef) and node.name != "UserError"
             and any(getattr(base, "id", None) == "ValueError" for base in node.bases)]
    assert found == []


# Sub-rooms that stand apart from the rest of their room: they import none of its other modules
# (diagnose/judging/: figures and rules in, verdicts out; the part that runs tests hands it figures).
APART = ("fleetbench.diagnose.judging",)


def test_a_sub_room_kept_apart_imports_nothing_else_of_its_room():
    graph = import_graph(modules())
    found = [f"{source} -> {target}" for sub in APART for source, targets in sorted(graph.items())
             if source.startswith(sub + ".") or source == sub for target in sorted(targets)
             if room(target) == room(source) and not (target.startswith(sub + ".") or target == sub)]
    assert found == []


def long_modules(top: Path = PACKAGE, base: Path = REPO) -> list:
    """Modules over NOTE_MODULE_LINES lines: each should say in its opening comment why it is one."""
    return [f"{path.relative_to(base)}: {path.read_text().count(chr(10))} lines" for path in sorted(top.rglob("*.py"))
            if path.read_text().count("\n") > NOTE_MODULE_LINES]


def test_modules_over_the_note_length_are_named_not_failed(capsys):
    found = long_modules()
    with capsys.disabled():
        for line in found:
            print(f"\nnote: {line} (over {NOTE_MODULE_LINES}: its opening comment should say why it is one module)")


def test_the_long_module_note_names_a_module_over_the_length(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg/short.py").write_text("x = 1\n")
    (tmp_path / "pkg/long.py").write_text("x = 1\n" * (NOTE_MODULE_LINES + 1))
    assert long_modules(tmp_path / "pkg", tmp_path) == [f"pkg/long.py: {NOTE_MODULE_LINES + 1} lines"]


def test_functions_and_parameter_lists_stay_small():
    too_big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(REPO)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                params = [a.arg for a in node.args.posonlyargs + node.args.args]
                positional = len([a for a in params if a not in ("self", "cls")])
                if length > MAX_FUNCTION_LINES:
                    too_big.append(f"{where}:{node.lineno} {node.name}: {length} lines")
                if positional > MAX_POSITIONAL:
                    too_big.append(f"{where}:{node.lineno} {node.name}: {positional} positional parameters")
    assert too_big == []


def unannotated(path: Path, base: Path = REPO) -> list:
    """Functions of a module with a parameter (self and cls aside) or the return not annotated."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            params = a.posonlyargs + a.args + a.kwonlyargs + [p for p in (a.vararg, a.kwarg) if p]
            if node.returns is None or any(p.annotation is None for p in params if p.arg not in ("self", "cls")):
                found.append(f"{path.relative_to(base)}:{node.lineno} {node.name}")
    return found


def test_the_annotated_rooms_stay_annotated(tmp_path):
    paths = [path for room in ANNOTATED for path in sorted((REPO / room).rglob("*.py"))]
    assert [f for path in paths for f in unannotated(path)] == []
    (tmp_path / "m.py").write_text("def f(a: int, *rest, b: str = '') -> None: ...\n"
                                   "class C:\n    def g(self, x: int): ...\n    def h(self) -> int: ...\n")
    assert unannotated(tmp_path / "m.py", tmp_path) == ["m.py:1 f", "m.py:3 g"]


def test_no_two_test_files_share_a_name():
    """tests/ has no __init__.py: pytest imports each file by its basename, so two files of one
    name in different tiers fail the collection of any session that holds both."""
    names = {}
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        names.setdefault(path.name, []).append(str(path.relative_to(REPO)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}
