"""The package's shape, read from its source (docs/architecture.md): data flows one way, so no
import circle (lazy imports count); measure/ is the paddle-free vocabulary; modules, functions and
positional parameter lists stay small enough to read at once."""
import ast
from pathlib import Path

from util import REPO

PACKAGE = REPO / "fleetbench"
MAX_MODULE_LINES, MAX_FUNCTION_LINES, MAX_POSITIONAL = 450, 45, 7


def modules() -> dict:
    """{dotted name: path} of every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(name: str, path: Path, known: dict) -> set:
    """The package's modules `name` imports, anywhere in its body (lazy imports count)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names}
    return {m for m in found if m in known and m != name}


def circles(graph: dict) -> list:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
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
    known = modules()
    graph = {name: imported(name, path, known) for name, path in known.items()}
    assert circles(graph) == []


def test_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_measure_imports_no_paddle():
    offenders = []
    for path in sorted((PACKAGE / "measure").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.relative_to(REPO)}:{node.lineno}" for n in names if n.split(".")[0] == "paddle"]
    assert offenders == []


def test_modules_functions_and_parameter_lists_stay_small():
    too_big = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(REPO)
        if source.count("\n") > MAX_MODULE_LINES:
            too_big.append(f"{where}: {source.count(chr(10))} lines")
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
