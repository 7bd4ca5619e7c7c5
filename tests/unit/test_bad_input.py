"""The bad-input matrix: every flag of every subcommand, given what it must refuse.

The cases are read from the command lines themselves (fleetbench.cli.parsers(); `launch`'s own
table of flag kinds; a benchmark script's run layer): for each flag, the inputs its kind declares
(cmdline.Kind.bad: wrong type, empty, zero, negative, out of range, a path that cannot be written
or read), `nosuch` for a flag with choices, a value given to a switch, and the rows of ROWS: files
with a corrupt line, and flags whose parser declares no kind. Each case runs in-process through
`fleetbench.cli.main(argv)` in a directory holding a results store, a sweep, logs and a hostfile,
and must end with exit 2 and one line on stderr naming the flag (or the file) and what was
expected: no traceback, nothing on stdout, no file created, changed or removed there.

A new flag is covered by the kind it declares, or by a row of ROWS; one with neither fails
test_every_flag_is_covered. `python -m pytest tests/unit/test_bad_input.py -q -s -k census`
prints how many subcommands, flags and inputs the matrix holds.
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import os
import re
import runpy
import shutil
import signal
import sys
from pathlib import Path

import pytest
from util import REPO

from fleetbench import cli, cmdline
from fleetbench.hosts import launch, remote
from fleetbench.train import run as run_layer

STORE_LINES = (REPO / "results" / "kvm-2vcpu-paddle2.6.2-cluster-ssh.jsonl").read_text().splitlines(keepends=True)[:2]
SCRIPT = "parameter_server/ctr.py"  # the run layer every benchmark script shares, run in-process
RUN_LAYER = ("ctr",)                # its prefix in the matrix: the script's own name

# Files of the working directory a case runs in ({name} in a value or a row).
FILES = {
    "store": "".join(STORE_LINES),
    "corrupt": STORE_LINES[0] + "{not a record\n" + STORE_LINES[1],
    "sweep": "cells:\n  - benchmark: resnet50\n    preset: tiny\n",
    "bad_yaml": "cells: [ {benchmark: resnet50\n",
    "log": "some output\nFLEETBENCH_RESULT " + STORE_LINES[0],
    "bad_log": "FLEETBENCH_RESULT {broken\n",
    "hostfile": "node1 slots=2\n",
    "bad_hostfile": "node1 slots=x\n",
    "topo": (REPO / "tests" / "fixtures" / "topo" / "pcie_4gpu_nic_legend.txt").read_text(),
    "bad_topo": "nothing like nvidia-smi topo -m\n",
    "readme": "# no results markers here\n",
    "bad_json": "{broken",
    "bad_rules": "rules:\n  - metric: matmul_gflopz\n    below_reference_pct: 25\n    category: compute\n",
    "bad_csv": "1,2,three\n",
    "noop.py": "pass\n",
}

# Positional arguments (and options) each command line gets besides the one under test: a valid
# call whose action is harmless (status, down, --dry-run) should a bad value ever be accepted.
BASE = {
    ("cluster",): (["status"], ["--name", "zz9"]),
    ("sshd",): (["down"], ["--name", "zz9"]),
    ("slurmd",): (["down"], ["--name", "zz9"]),
    ("diagnose",): ([], ["--passes", "1", "--seconds", "0.05", "--timeout", "5"]),
    ("k8s",): (["resnet50"], ["--image", "img"]),
    ("slurm",): (["{sweep}"], []),
    ("report",): (["{store}"], []),
    ("explain",): (["{store}"], []),
    ("compare",): (["{store}", "{store}"], []),
    ("history",): (["{store}"], []),
    ("gate",): (["{store}"], ["--db", "sqlite:///no-store.db"]),
    ("sweep",): (["{sweep}"], ["--dry-run"]),
    ("results", "import"): (["{log}"], []),
    ("topo",): ([], ["--input", "{topo}"]),
    ("data",): (["gen", "bert"], []),
    ("data", "gen", "bert"): ([], ["--out", "out.npz"]),
    ("data", "gen", "wmt16"): ([], ["--out", "out"]),
    ("data", "gen", "criteo"): ([], ["--out", "out", "--rows", "10"]),
    ("data", "gen", "mnist"): ([], ["--out", "out"]),
    ("data", "gen", "word2vec"): ([], ["--out", "out", "--sentences", "10"]),
    ("data", "validate", "criteo"): (["{directory}"], []),
    ("data", "validate", "mnist"): (["{directory}"], []),
    ("data", "get", "mnist-5k"): ([], ["--out", "out", "--csv", "{bad_csv}"]),
    ("launch",): (["{noop.py}"], []),
    RUN_LAYER: ([], ["--preset", "tiny"]),
}

# Inputs refused beyond what a flag's kind declares: files with a corrupt line (a kind checks
# a path, the command its content), and the flags of a parser that declares no kinds.
ROWS = {
    ("report", "results"): ["{corrupt}"],
    ("report", "--readme"): ["{readme}"],
    ("explain", "results"): ["{corrupt}"],
    ("explain", "--validate"): ["nodes=9", "nosuch=1", ""],
    ("explain", "--predict"): ["nosuch=1", "nodes=abc", ""],
    ("explain", "--anchor"): ["nosuch=1", "nodes<=x", ""],
    ("explain", "--model-def"): ["{bad_yaml}"],
    ("sweep", "file"): ["{bad_yaml}"],
    ("sweep", "--hostfile"): ["{bad_hostfile}"],
    ("slurm", "sweep"): ["{bad_yaml}"],
    ("k8s", "what"): ["{bad_yaml}"],
    ("k8s", "--preset"): ["nosuch"],
    ("k8s", "--set"): ["nosuch=1"],
    ("k8s", "--env"): ["NOVALUE", "=x", "1X=y", "FLEETBENCH_NODES=2"],
    ("k8s", "--rdma"): ["", "rdma/x=0", "not a resource"],
    ("results", "import", "logs"): ["{bad_log}"],
    ("topo", "--input"): ["{bad_topo}"],
    ("data", "name"): ["nosuch"],
    ("data", "get", "mnist-5k", "--wheel"): ["{bad_csv}"],
    ("launch", "--hostfile"): ["{bad_hostfile}"],
    ("compare", "results"): ["{corrupt}"],
    ("compare", "--ignore"): ["nosuch"],
    ("compare", "--match"): ["nosuch"],
    ("history", "results"): ["{corrupt}"],
    ("history", "--ignore"): ["nosuch"],
    ("history", "--match"): ["nosuch"],
    ("gate", "--ignore"): ["nosuch"],
    ("gate", "--match"): ["nosuch"],
    (*RUN_LAYER, "--preset"): ["nosuch"],
    (*RUN_LAYER, "--set"): ["nosuch=1", "batch_size=0"],
    # diagnose (its parser declares no kinds)
    ("diagnose", "--cluster"): ["Bad"],
    ("diagnose", "--hosts"): ["", ",", "a:0"],
    ("diagnose", "--hostfile"): ["{missing}", "{bad_hostfile}"],
    # without hosts, a good ssh config or Python would be silently unused: refused too
    ("diagnose", "--ssh-config"): ["{missing}", "{directory}", "{hostfile}"],
    ("diagnose", "--remote-python"): ["", "python3"],
    ("diagnose", "--rules"): ["{missing}", "{directory}", "{bad_yaml}", "{bad_rules}"],
    ("diagnose", "--baseline"): ["{missing}", "{directory}", "{bad_json}"],
    ("diagnose", "--save-baseline"): [cmdline.UNWRITABLE + ".json", "{directory}"],
    ("diagnose", "--results"): ["{corrupt}", "{directory}", cmdline.UNWRITABLE + ".jsonl"],
    ("diagnose", "--passes"): ["0", "-1", "abc", ""],
    ("diagnose", "--runs"): ["0", "-1", "abc"],
    ("diagnose", "--seconds"): ["0", "-1", "abc", "nan"],
    ("diagnose", "--timeout"): ["0", "-5", "abc"],
}
# Flags that take a value and refuse none: free text, said why.
FREE = {
    ("data", "gen", "word2vec", "--text"): "any text is a corpus",
}


# ----------------------------------------------------------------------------------------------
# the walk


def _flag(action: argparse.Action) -> str:
    return max(action.option_strings, key=len) if action.option_strings else action.dest


def _run_layer_parser() -> argparse.ArgumentParser:
    return run_layer.arg_parser(RUN_LAYER[0])


@functools.lru_cache(maxsize=None)
def parsers() -> dict:
    """Built once: the walk reads them, every case runs its command's own."""
    return {**cli.parsers(), RUN_LAYER: _run_layer_parser()}


def flags_of(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))]


def inputs_of(prefix: tuple, flag: str, kind, choices, switch: bool) -> list[str]:
    found = list(kind.bad) if isinstance(kind, cmdline.Kind) else []
    found += ["nosuch"] if choices else []
    found += ["yes"] if switch else []
    return list(dict.fromkeys(found + ROWS.get((*prefix, flag), [])))


def launch_kinds() -> dict:
    return {**launch.PADDLE_KINDS, **launch.OWN_KINDS, **remote.KINDS}


def cases() -> list:
    """(prefix, flag, positional?, value) for every input of every flag."""
    found = []
    for prefix, parser in sorted(parsers().items()):
        for action in flags_of(parser):
            switch = action.nargs == 0
            values = inputs_of(prefix, _flag(action), action.type, action.choices, switch)
            found += [(prefix, _flag(action), not action.option_strings, value) for value in values]
    for flag, kind in sorted(launch_kinds().items()):
        found += [(("launch",), flag, False, value) for value in inputs_of(("launch",), flag, kind, None, False)]
    found += [(("launch",), flag, False, "yes") for flag in sorted(launch.SWITCHES)]
    return found


CASES = cases()


# ----------------------------------------------------------------------------------------------
# running one case


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    for name, text in FILES.items():
        suffix = "" if "." in name else {"store": ".jsonl", "corrupt": ".jsonl", "sweep": ".yaml",
                                          "bad_yaml": ".yaml", "readme": ".md", "bad_rules": ".yaml"}.get(name, ".txt")
        (tmp_path / (name + suffix)).write_text(text)
    (tmp_path / "adir").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FLEETBENCH_CLUSTER_STATE_DIR", str(tmp_path / "cluster-state"))
    return tmp_path


def fill(value: str, tmp: Path) -> str:
    for name in FILES:
        path = next(tmp.glob(name if "." in name else name + ".*"))
        value = value.replace("{" + name + "}", str(path))
    return (value.replace(cmdline.MISSING, str(tmp / "missing" / "nothing"))
            .replace(cmdline.DIRECTORY, str(tmp / "adir")).replace(cmdline.CORRUPT, str(tmp / "corrupt.jsonl")))


def argv_for(prefix: tuple, flag: str, positional: bool, value: str, tmp: Path) -> list[str]:
    positionals, options = BASE.get(prefix, ([], []))
    if prefix == ("launch",):  # launcher flags come before SCRIPT
        given = [f"{flag}={value}"] if flag in launch.SWITCHES else [flag, value]
        return [fill(a, tmp) for a in ["launch", *given, *positionals]]
    parser = parsers()[prefix]
    args, given = [], iter(positionals)
    for action in (a for a in flags_of(parser) if not a.option_strings):
        if action.dest == flag:
            args.append(value)
            next(given, None)
        elif action.nargs in ("+", "*"):  # the rest of the base's (compare's BASE NEW)
            args += list(given)
        else:
            args += [v for v in [next(given, None)] if v is not None]
    kept = [o for i, o in enumerate(options) if flag not in (o, options[i - 1] if i else None)]
    if not positional:
        args += [f"{flag}={value}"] if value == "yes" and flag.startswith("--") and _is_switch(parser, flag) \
            else [flag, value]
    words = list(prefix) if prefix != RUN_LAYER else []
    return [fill(a, tmp) for a in words + args + kept]


# How a line says what was expected: in those words; a config key's own check says "must be" and
# lists the keys, presets and metrics there are (measure/config.py: `known here`, `available`;
# diagnose's rules: `known metrics`).
EXPECTING = r"expected|must be|known here|known metrics|available"


def metavars(prefix: tuple, flag: str) -> list[str]:
    """The names a line may call a flag by (argparse calls a positional by its metavar)."""
    if prefix == ("launch",):
        return []
    return [a.metavar for a in flags_of(parsers()[prefix]) if _flag(a) == flag and isinstance(a.metavar, str)]


def _is_switch(parser, flag) -> bool:
    return any(_flag(a) == flag and a.nargs == 0 for a in flags_of(parser))


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def run_in_process(prefix: tuple, argv: list[str]) -> int:
    previous = signal.getsignal(signal.SIGPIPE)
    try:
        if prefix == RUN_LAYER:
            old_argv, sys.argv = sys.argv, [SCRIPT, *argv]
            try:
                runpy.run_path(str(REPO / SCRIPT), run_name="__main__")
                return 0
            finally:
                sys.argv = old_argv
        return cli.main(argv)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 1
    finally:
        signal.signal(signal.SIGPIPE, previous)


@pytest.mark.parametrize("prefix, flag, positional, value", CASES,
                         ids=[f"{' '.join(p)} {f} {v!r}" for p, f, _, v in CASES])
def test_bad_input_is_one_line_exit_2_and_nothing_written(prefix, flag, positional, value, workdir, capsys):
    argv = argv_for(prefix, flag, positional, value, workdir)
    before = snapshot(workdir)
    code = run_in_process(prefix, argv)
    out, err = capsys.readouterr()
    said = f"argv: {argv}\nexit {code}\nstdout: {out[-500:]!r}\nstderr: {err[-1500:]}"
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, said
    assert len(lines) == 1 and "Traceback" not in err, said
    assert out == "", said
    line = lines[0]
    names = [n for n in (flag, *metavars(prefix, flag), fill(value, workdir).split("=")[0]) if n.strip()]
    assert any(n in line for n in names), f"the line names none of {names}\n{said}"
    assert re.search(EXPECTING, line), f"the line does not say what was expected\n{said}"
    assert snapshot(workdir) == before, f"files changed\n{said}"


# ----------------------------------------------------------------------------------------------
# what the matrix holds


def test_every_flag_is_covered():
    """Every flag that takes a value has inputs it must refuse (a kind, choices or a row)."""
    missing = []
    for prefix, parser in parsers().items():
        for action in flags_of(parser):
            flag = _flag(action)
            if action.nargs != 0 and not inputs_of(prefix, flag, action.type, action.choices, False) \
                    and (*prefix, flag) not in FREE:
                missing.append(f"{' '.join(prefix)} {flag}")
    assert missing == [], "flags with no bad input: give them a cmdline.Kind or a row of ROWS"


def test_every_parser_is_the_shared_one():
    """One parser class, so every argparse error is one line (cmdline.Parser)."""
    assert {" ".join(p): type(parser).__name__ for p, parser in parsers().items()
            if not isinstance(parser, cmdline.Parser)} == {}


def test_the_rows_name_flags_that_exist():
    known = {(*p, _flag(a)) for p, parser in parsers().items() for a in flags_of(parser)}
    known |= {("launch", f) for f in launch_kinds()}
    assert sorted(set(ROWS) - known) == [] and sorted(set(FREE) - known) == []


def test_census():
    commands = {p for p, *_ in CASES}
    flags = {(p, f) for p, f, *_ in CASES}
    print(f"\nbad-input matrix: {len(commands)} command lines, {len(flags)} flags, {len(CASES)} inputs")
    assert len(commands) >= 20 and len(flags) >= 150 and len(CASES) >= 500


def test_a_refusal_is_one_line_and_exit_2_and_a_bug_keeps_its_traceback(capsys):
    """cmdline.refusing: the one path from a UserError to `PROG: error: LINE` and exit 2; what is
    not a refusal (here a KeyError, a bug) is not turned into one."""
    from fleetbench.store import results

    @cmdline.refusing("fleetbench demo")
    def command(argv: list[str]) -> int:
        if argv == ["record"]:
            raise results.RecordError("r.jsonl:3: metrics.unit: missing")
        if argv == ["bug"]:
            raise KeyError("unit")
        return 0

    assert command([]) == 0 and capsys.readouterr().err == ""
    assert command(["record"]) == 2
    assert capsys.readouterr().err == "fleetbench demo: error: r.jsonl:3: metrics.unit: missing\n"
    with pytest.raises(KeyError):
        command(["bug"])
