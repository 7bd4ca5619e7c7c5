"""Every command the README and docs/*.md show works as shown.

The commands are read from the docs' code blocks, so a command added or changed there is checked
without editing this file:
- the cheap ones run for real (`--help`, `--check`, `--dry-run`, `data gen`, `report`, `explain`,
  `env`, the manifest writers `k8s` and `slurm`, and documented config failures), in a temporary
  directory with their outputs rewritten into it and data sizes scaled down; the exit code must be
  0, or 2 with the documented error line where the docs show one;
- the others start clusters, daemons or training: their subcommand's own parser reads them and is
  stopped before it acts, so a flag that no longer exists fails here;
- every subcommand the docs name answers --help, every make target they name exists, and every
  file of the repository they name exists.
The extraction states what it found and fails below known minimums, so a change in the docs'
format cannot quietly turn these checks into nothing.
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import importlib
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from util import REPO, env, paddle3_python

from fleetbench.cli import SUBCOMMANDS

DOCS = [REPO / "README.md"] + sorted((REPO / "docs").rglob("*.md"))
PROGRAMS = ("fleetbench", ".venv/bin/fleetbench", "python", ".venv/bin/python", "fleetrun", "make")
# What a documented `results/<env>-...` stands for: the environment the committed results come from.
ENV_NAME = "kvm-2vcpu-paddle2.6.2"
# The docs' my_sweep.yaml, the reader's own sweep: one cell (a sweep's --dry-run runs each cell's
# --check, a Paddle import each), no emulated links (Slurm refuses those).
MY_SWEEP = """description: the docs' my_sweep.yaml
repeats: 2
timeout: 300
cells:
  - benchmark: resnet50
    preset: tiny
    devices_per_node: 2
"""
# A small committed results file for globs like results/*.jsonl: report and explain stay fast.
SMALL_RESULTS = REPO / "results" / f"{ENV_NAME}-cluster-ssh.jsonl"
OUTPUT_FLAGS = ("--out", "--images", "--results", "--log-dir", "--readme", "--full")
INPUT_FLAGS = ("--hostfile", "--ssh-config", "--input", "--text", "--wheel", "--csv", "--dict", "--baseline", "--rules",
               "--db")
# Data-set sizes scaled to seconds: the format and the flags are what is checked, not the size.
SMALL_SIZES = {"--rows": "200", "--sentences": "300", "--vocabulary": "300", "--examples": "64",
               "--pairs": "100", "--train": "50", "--test": "20", "--files": "2"}
CHEAP_SUBCOMMANDS = ("report", "explain", "env", "k8s", "slurm")
CHEAP_FLAGS = ("--help", "-h", "--check", "--dry-run")


@dataclasses.dataclass(frozen=True)
class DocCommand:
    where: str                 # file:line
    text: str                  # as documented, without its comment
    argv: tuple                # without a `flock LOCK` or `salloc ...` prefix
    comment: str = ""          # the documented comment, e.g. "on a CPU build"
    output: tuple = ()         # the documented output lines (a `$ ` block's lines after the command)

    @property
    def error(self) -> str | None:
        """The documented error line of a failing command."""
        return next((line for line in self.output if ": error:" in line), None)

    @property
    def program(self) -> str:
        return os.path.basename(self.argv[0])

    @property
    def subcommand(self) -> str | None:
        return self.argv[1] if self.program == "fleetbench" and len(self.argv) > 1 else None

    @property
    def conditional(self) -> bool:
        """Shown for one kind of machine ("# on 3.3.1", "# on a GPU node")."""
        return self.comment.startswith("on ")


# ----------------------------------------------------------------------------------------------
# extraction


def code_blocks(path: Path):
    """(line number of the block's first line, its lines) for every fenced block."""
    block, start = None, 0
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.lstrip().startswith("```"):
            if block is None:
                block, start = [], number + 1
            else:
                yield start, block
                block = None
        elif block is not None:
            block.append(line)


def logical_lines(start: int, lines: list):
    """(line number, text) with backslash continuations joined."""
    pending, first = "", start
    for number, line in enumerate(lines, start=start):
        if not pending:
            first = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield first, pending + line
        pending = ""


def split_comment(text: str) -> tuple:
    match = re.search(r"\s#\s?(.*)$", text)
    return (text[:match.start()], match.group(1).strip()) if match else (text, "")


def strip_prefix(argv: list) -> list:
    """`flock LOCK CMD` and `salloc ARGS CMD` run CMD."""
    if argv and argv[0] == "flock":
        argv = argv[2:]
    if argv and argv[0] == "salloc":
        argv = argv[1:]
        while argv and argv[0].startswith("-"):
            argv = argv[1:]
    return argv


def drop_optional(argv: list) -> list:
    """`[--seed 0]`, `[--json]`: a synopsis's optional parts, left out (the command runs without)."""
    out, depth = [], 0
    for token in argv:
        depth += token.count("[") if token.startswith("[") or depth else 0
        if not depth:
            out.append(token)
        depth -= token.count("]") if depth else 0
    return out


def is_output(text: str) -> bool:
    """`fleetbench launch: error: ...`, `resnet50: error: ...`: what a command printed."""
    return bool(re.match(r"(fleetbench( [\w-]+)*|[\w-]+):\s", text))


def commands_in(path: Path) -> list:
    """The commands of a doc's code blocks, each with what the doc shows it print: the lines after
    it in a `$ ` block, or a block right after (nothing between the fences) a block of that one
    command, as docs/guide/compare.md shows a comparison."""
    found, previous_end, alone = [], None, None
    for start, lines in code_blocks(path):
        if alone is not None and start == previous_end + 3 and not _commands_of(path, start, lines):
            found[found.index(alone)] = dataclasses.replace(alone, output=tuple(l.strip() for l in lines if l.strip()))
        block = _commands_of(path, start, lines)
        found += block
        previous_end, alone = start + len(lines) - 1, block[0] if len(block) == 1 and not block[0].output else None
    return found


def _commands_of(path: Path, start: int, lines: list) -> list:
    found = []
    prompted = any(line.startswith("$ ") for line in lines)
    last = None
    for number, line in logical_lines(start, lines):
        if prompted and not line.startswith("$ "):
            if last is not None and line.strip():  # what the last command printed
                found[-1] = last = dataclasses.replace(last, output=last.output + (line.strip(),))
            last = None if not line.strip() else last
            continue
        last = None  # a new prompt: what follows is its command's output
        text, comment = split_comment(line[2:] if prompted else line)
        text = re.split(r"\s>\s", text)[0]  # a redirection: the command is what matters
        for part in re.split(r"\s*(?:&&|;|\|)\s*", text.strip()):
            try:
                argv = drop_optional(strip_prefix(shlex.split(part)))
            except ValueError:
                continue
            if argv and argv[0] in PROGRAMS and not is_output(part.strip()):
                last = DocCommand(f"{path.relative_to(REPO)}:{number}", part.strip(), tuple(argv), comment)
                found.append(last)
    return found


def inline_code(path: Path) -> list:
    """The `...` spans outside code blocks (prose)."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return re.findall(r"`([^`\n]+)`", text)


ALL = [command for doc in DOCS for command in commands_in(doc)]


def quick_start() -> tuple:
    """The README's quick-start commands: (on any machine, on the 8-GPU node), split at the line
    that opens the GPU block."""
    lines = (REPO / "README.md").read_text().splitlines()
    start = lines.index("## Quick start") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("## ")) + 1
    gpu = next(i for i in range(start, end) if lines[i].startswith("**On an 8-GPU node**")) + 1
    readme = [c for c in ALL if c.where.startswith("README.md:")]
    line = lambda c: int(c.where.split(":")[1])  # noqa: E731
    return ([c for c in readme if start < line(c) < gpu], [c for c in readme if gpu < line(c) < end])


QUICK_START_SHOWN = {c.where for block in quick_start() for c in block if c.output}


# ----------------------------------------------------------------------------------------------
# what to do with each command


def placeholder(command: DocCommand) -> str | None:
    """The token that stands for something the reader fills in, if any."""
    for token in command.argv[1:]:
        token = token.replace("<env>", ENV_NAME)
        if "..." in token or "…" in token or token.startswith("[") or "<" in token:
            return token
    return None


def input_paths(argv: tuple) -> list:
    """The paths a command reads: values of INPUT_FLAGS, `--set KEY.path=P`, and positional
    arguments that look like paths (flag values such as `--image registry/x:1` are not)."""
    paths = []
    for previous, token in zip(argv, argv[1:]):
        if previous in INPUT_FLAGS:
            paths.append(token)
        elif re.match(r"[\w.]*path=", token):
            paths.append(token.split("=", 1)[1])
        elif not previous.startswith("-") and not token.startswith("-") and "=" not in token \
                and ("/" in token or token.endswith((".jsonl", ".yaml", ".txt", ".npz", ".log"))):
            paths.append(token)
    return paths


def missing_input(command: DocCommand) -> str | None:
    """A path the command reads that neither the repository nor this test has (a user's data)."""
    for token in input_paths(command.argv):
        if not (map_input(token) or glob.glob(str(REPO / token.replace("<env>", ENV_NAME)))):
            return token
    return None


def _trains(c: DocCommand) -> bool:
    return c.program in ("fleetrun",) or (c.program == "python" and c.argv[1].startswith(("collective/", "parameter_server/"))
                                            and not set(CHEAP_FLAGS) & set(c.argv) and not c.error)


# Subcommands whose exit status is a verdict, as their docs say: 1 is "a cell is slower" (compare),
# "a node is defective" (diagnose; 3: something measured while others took the machine, not judged),
# not a failure of the command.
VERDICT_EXITS = {"compare": (0, 1), "diagnose": (0, 1, 3)}


# Every documented command that is not run here, and why: one list, the first match says why.
# Whatever none matches runs (test_the_documented_command_runs), in seconds, so a command added
# to the docs is either run or listed here; the skipped ones are still parsed by their own parser
# (test_the_documented_command_parses). The listing test prints every command with its reason.
NOT_RUN = (
    ("quick start", lambda c: c.where in QUICK_START_SHOWN,
     "the README's quick start, run verbatim with its output's shape checked (test_the_readme_quick_start_*; "
     "the 8-GPU block in tests/gpu_sim/test_sim_readme.py)"),
    ("make target", lambda c: c.program == "make",
     "test_documented_make_targets_exist: the target exists; `make test`/`demo` are minutes"),
    ("placeholder", lambda c: placeholder(c) is not None, "a placeholder the reader fills in"),
    ("other machines", lambda c: c.comment.startswith(("on a GPU node", "on a cluster")),
     "needs a GPU node or a known-healthy cluster (said in its comment)"),
    ("nvidia-smi", lambda c: c.subcommand == "topo" and "--input" not in c.argv,
     "reads nvidia-smi (a GPU node); `topo --input FILE` is run on a saved topology"),
    ("GPUs", lambda c: c.subcommand not in ("k8s", "slurm", "topo") and not c.error
     and any(t.startswith(("--gpus", "--devices")) or t in ("nccl_full", "full_amp", "seq128") for t in c.argv),
     "needs GPUs; on CPU the launcher's refusal is run where the docs show it"),
    ("pytest", lambda c: c.program == "python" and c.argv[1:3] == ("-m", "pytest"),
     "runs tests of the suite (they must exist)"),
    ("not ours", lambda c: c.program == "python" and c.argv[1] == "-m", "another package's module"),
    ("suite tools", lambda c: c.program == "python" and c.argv[1].startswith(("bench/", "results/reference/")),
     "a benchmark of the suite's overhead or a converter (minutes; bench/ is run on a quiet machine)"),
    ("user's files", lambda c: missing_input(c) is not None,
     "reads a file the user brings (a hostfile of real hosts, their corpus, a diagnosis of their cluster)"),
    ("training", _trains,
     "trains a benchmark (20 s to hours on 2 cores); the tiny presets are trained by tests/job "
     "(test_resnet50, test_methods, test_ps, test_arch, test_launch)"),
    ("launched jobs", lambda c: c.subcommand == "launch" and not c.error,
     "launches a job (tests/job/test_launch.py and tests/root/test_ssh_cluster.py run the same shapes)"),
    ("sweeps", lambda c: c.subcommand == "sweep" and "--dry-run" not in c.argv,
     "a sweep of real runs (minutes to hours); `--dry-run` is run"),
    ("emulated cluster", lambda c: c.subcommand in ("cluster", "sshd", "slurmd")
     and c.argv[2:3] != ("status",) or c.subcommand == "diagnose" and "--cluster" in c.argv,
     "root: namespaces, tc, sshd and slurmd (tests/root: test_netem, test_ssh_cluster, test_slurm, test_diagnose)"),
    ("network", lambda c: c.subcommand == "data" and c.argv[2:3] == ("get",) and "--wheel" not in c.argv
     and "--csv" not in c.argv, "downloads a wheel from PyPI (tests/unit/test_mnist.py converts a local one)"),
    ("Slurm", lambda c: c.program in ("salloc", "sbatch") or "--executor" in c.argv and "slurm" in c.argv,
     "needs a Slurm allocation (tests/root/test_slurm.py runs the emulated one)"),
)


NOT_PARSED = ("make target", "placeholder", "not ours")  # no parser of the suite reads them


def plan(command: DocCommand) -> tuple:
    """("run", how) or ("skip", why) from NOT_RUN."""
    for _name, matches, why in NOT_RUN:
        if matches(command):
            return "skip", why
    if command.comment.startswith("on 3.3.1"):
        return "run", "with the Paddle 3.x interpreter"
    return "run", "seconds"


def _mnist(tmp: Path, bad: bool) -> None:
    out = tmp / "data" / ("bad" if bad else "mnist")
    subprocess.run([sys.executable, "-m", "fleetbench", "data", "gen", "mnist", "--out", str(out), "--train", "20",
                    "--test", "10"], check=True, capture_output=True, env=env(), timeout=120)
    if bad:  # the labels where the images should be: IDX magic 0x801, not 0x803 (docs/guide/convergence.md)
        shutil.copy(out / "train-labels-idx1-ubyte", out / "train-images-idx3-ubyte")


# Inputs the docs name that a documented command before them makes (or the reader has at hand):
# made in the directory a command runs in, small.
MADE_HERE = {
    "my_sweep.yaml": lambda tmp: (tmp / "my_sweep.yaml").write_text(MY_SWEEP),
    "data/criteo": lambda tmp: subprocess.run(
        [sys.executable, "-m", "fleetbench", "data", "gen", "criteo", "--out", str(tmp / "data" / "criteo"),
         "--rows", "200", "--files", "2"], check=True, capture_output=True, env=env(), timeout=120),
    "data/bad": lambda tmp: _mnist(tmp, bad=True),
    "sweep.log": lambda tmp: (tmp / "sweep.log").write_text(
        "cell 1/1 ...\nFLEETBENCH_RESULT " + SMALL_RESULTS.read_text().splitlines()[0] + "\n"),
    "topo.txt": lambda tmp: shutil.copy(REPO / "tests" / "fixtures" / "topo" / "fleetx_8xv100.txt", tmp / "topo.txt"),
    # docs/guide/history.md's results database: the two committed demos (two commits of the same cells)
    "history.db": lambda tmp: subprocess.run(
        [sys.executable, "-m", "fleetbench", "results", "import", "--db", str(tmp / "history.db"),
         *sorted(glob.glob(str(REPO / "results" / f"{ENV_NAME}-demo*.jsonl")))],
        check=True, capture_output=True, env=env(), timeout=120),
}


def map_input(token: str) -> str | None:
    """A documented input path as the repository has it (absolute), or None."""
    token = token.replace("<env>", ENV_NAME)
    if token in MADE_HERE:
        return token  # made in the directory the command runs in
    if token in ("results/*.jsonl", "results/runs.jsonl"):
        return str(SMALL_RESULTS)
    if token == "results/*.jsonl@explain":  # explain's --validate needs cells of several sizes
        return str(REPO / "results" / f"{ENV_NAME}-explain.jsonl")
    path = REPO / token
    if path.exists():
        return str(path)
    committed = REPO / "results" / f"{ENV_NAME}-{Path(token).name}"
    if token.startswith("results/") and committed.exists():  # the file a documented sweep wrote here
        return str(committed)
    return None


def rewrite(command: DocCommand, tmp: Path) -> list:
    """The command's argv to run here: outputs into tmp, inputs from the repository, sizes small."""
    argv, out = list(command.argv), []
    python = paddle3_python() if command.comment.startswith("on 3.3.1") else sys.executable
    if command.program in ("fleetbench", ".venv/bin/fleetbench"):
        out = [python, "-m", "fleetbench"]
    elif command.program == "python":
        out = [python]
    argv = argv[1:]
    i = 0
    while i < len(argv):
        token = argv[i].replace("<env>", ENV_NAME)
        if token in OUTPUT_FLAGS and i + 1 < len(argv):
            out += [token, output_path(token, argv[i + 1], tmp)]
            i += 2
            continue
        if token in SMALL_SIZES and i + 1 < len(argv):
            out += [token, SMALL_SIZES[token]]
            i += 2
            continue
        # the subcommand (`data`, `results`, ...) is a word, even where a folder of that name exists
        is_word = i == 0 and command.program != "python"
        explain_glob = command.subcommand == "explain" and token == "results/*.jsonl"
        mapped = map_input(token + "@explain" if explain_glob else token) if not token.startswith("-") and not is_word else None
        if mapped is None and "*" in token:
            out += sorted(glob.glob(str(REPO / token)))
        else:
            out.append(mapped or token)
        i += 1
    return out


def output_path(flag: str, value: str, tmp: Path) -> str:
    """Relative outputs land in tmp, where the command runs; absolute ones are moved under it."""
    if value.startswith("/proc/"):
        return value  # the documented unwritable store: its refusal is the point
    target = tmp / value.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if flag in ("--readme", "--full"):  # the file is rewritten in place: give it a copy
        shutil.copy(REPO / value, target)
    return str(target)


def first_of_each(commands: list) -> list:
    """One of each command text: the same command shown in two docs runs once."""
    seen = {}
    for command in commands:
        seen.setdefault(command.text, command)
    return list(seen.values())


RUN = first_of_each([c for c in ALL if plan(c)[0] == "run"])
PARSE = first_of_each([c for c in ALL if plan(c)[0] == "skip"
                       and plan(c)[1] not in {why for name, _, why in NOT_RUN if name in NOT_PARSED}])


# ----------------------------------------------------------------------------------------------
# the extraction found what it must


def test_the_extraction_finds_the_documented_commands():
    listing = "\n".join(f"{plan(c)[0]:<5} {c.where:<22} {c.text}   [{plan(c)[1]}]" for c in ALL)
    print(listing)
    reasons = collections.Counter(plan(c)[1] for c in ALL if plan(c)[0] == "skip")
    print(f"{len(ALL)} documented commands ({len(RUN)} different ones run here, "
          f"{sum(1 for c in ALL if plan(c)[0] == 'skip')} not run):")
    print("\n".join(f"  {n:3d}  {why}" for why, n in reasons.most_common()))
    fleetbench = [c for c in ALL if c.program in ("fleetbench", ".venv/bin/fleetbench")]
    assert len(fleetbench) >= 80, f"only {len(fleetbench)} fleetbench commands found:\n{listing}"
    assert len(RUN) >= 25, f"only {len(RUN)} different cheap commands to run:\n{listing}"
    assert len(PARSE) >= 40, f"only {len(PARSE)} different commands to parse:\n{listing}"
    assert len([c for c in RUN if c.error]) >= 3, "the documented failures are no longer found"
    kinds = {c.subcommand for c in RUN} | {"--check" for c in RUN if "--check" in c.argv}
    assert {"report", "explain", "data", "sweep", "k8s", "slurm", "env"} <= kinds, kinds
    documented = {c.text for c in ALL}
    for known in ("fleetbench sweep my_sweep.yaml --dry-run", "fleetbench sshd up",
                  "python collective/resnet50.py --preset tiny --set batch_size=0"):
        assert known in documented, f"{known!r} is no longer found in the docs"


# ----------------------------------------------------------------------------------------------
# the cheap commands run


# A bound for a command that hangs, not a speed test: the heaviest documented command, `fleetbench
# report results/reference/*.jsonl` (66 charts, 41 CPU s on one core, quiet), took over 120 s, the
# bound until then, in a fresh clone's `make test` beside two busy loops (load ~10 on 2 cores).
COMMAND_TIMEOUT_S = 900


@pytest.mark.parametrize("command", RUN, ids=[c.where for c in RUN])
def test_the_documented_command_runs(command, tmp_path):
    for token in input_paths(command.argv):
        if token in MADE_HERE:
            MADE_HERE[token](tmp_path)
    argv = rewrite(command, tmp_path)
    proc = subprocess.run(argv, cwd=tmp_path, env=env(), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    said = f"{command.where}: {command.text}\nran: {shlex.join(argv)}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
    assert proc.returncode in ((2,) if command.error else VERDICT_EXITS.get(command.subcommand, (0,))), said
    if command.error:  # a refusal is its one line, nothing before it
        assert len(proc.stderr.strip().splitlines()) == 1, said
    printed = " ".join((proc.stdout + proc.stderr).split())
    for line in command.output:  # every documented line, but for its elisions (... or …)
        for fragment in re.split(r"\.\.\.|…", line):
            assert " ".join(fragment.split()) in printed, f"documented: {line}\n{said}"


# ----------------------------------------------------------------------------------------------
# the others parse


def stand_ins(command: DocCommand, tmp: Path) -> list:
    """The command's argv (without its program) with a stand-in for each input the user brings
    (parsers check that inputs exist and, for a hostfile, read it): made in tmp, globs expanded."""
    argv = []
    for i, token in enumerate(a.replace("<env>", ENV_NAME) for a in command.argv[1:]):
        if i == 0 and command.program != "python":  # the subcommand is a word (`results`), not the folder
            argv.append(token)
            continue
        if token not in input_paths(command.argv) or map_input(token) or glob.glob(str(REPO / token)):
            argv.append(map_input(token) or token)
            continue
        path = tmp / token.lstrip("/").replace("*", "part-0")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("node1 slots=4\nnode2 slots=4\n" if "host" in path.name else "")
        argv += sorted(glob.glob(str(tmp / token.lstrip("/")))) if "*" in token else [str(path)]
    return argv


class Parsed(Exception):
    """The subcommand's parser accepted the command line; nothing after it ran."""


@pytest.mark.parametrize("command", PARSE, ids=[c.where for c in PARSE])
def test_the_documented_command_parses(command, tmp_path, monkeypatch, capsys):
    if command.program in ("fleetrun", "python"):
        files = [t for t in command.argv[1:] if t.endswith(".py")]
        assert files, f"{command.where}: {command.text}: names no script"
        missing = [f for f in files if not (REPO / f).is_file()]
        assert not missing, f"{command.where}: {command.text}: not in the repository: {missing}"
        return
    monkeypatch.chdir(tmp_path)
    argv = stand_ins(command, tmp_path)
    if argv[0] == "launch":
        from fleetbench.hosts import launch

        args = launch.parse_argv(argv[1:])
        assert (REPO / args.script).is_file(), f"{command.where}: {command.text}: no {args.script}"
        return
    original = argparse.ArgumentParser.parse_args

    def parse_then_stop(self, args=None, namespace=None):
        original(self, args, namespace)  # exits 2 on an unknown flag or a bad choice
        raise Parsed

    # the subcommand would act (bring up namespaces, start daemons, run a sweep) after parsing
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_then_stop)
    (tmp_path / "my_sweep.yaml").write_text(MY_SWEEP)
    module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
    try:
        module.cli(argv[1:])
    except Parsed:
        return
    except SystemExit as exc:
        pytest.fail(f"{command.where}: {command.text}: exit {exc.code}: {capsys.readouterr().err.strip()}")
    pytest.fail(f"{command.where}: {command.text}: its parser never ran")


# ----------------------------------------------------------------------------------------------
# subcommands, make targets and files the docs name


def named_subcommands() -> set:
    names = {c.subcommand for c in ALL if c.subcommand}
    for doc in DOCS:
        for span in inline_code(doc):
            match = re.match(r"(?:\.venv/bin/)?fleetbench ([a-z0-9]+)\b(?!:)", span)  # `fleetbench result:` is output
            if match:
                names.add(match.group(1))
    return names


def test_every_subcommand_the_docs_name_exists_and_answers_help():
    names = named_subcommands()
    assert len(names) >= 12, names
    unknown = names - set(SUBCOMMANDS)
    assert not unknown, f"the docs name subcommands fleetbench does not have: {sorted(unknown)}"
    for name in sorted(names):
        proc = subprocess.run([sys.executable, "-m", "fleetbench", name, "--help"], cwd=REPO, env=env(),
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and f"fleetbench {name}" in proc.stdout, (name, proc.stdout, proc.stderr)


def test_documented_make_targets_exist():
    makefile = (REPO / "Makefile").read_text()
    targets = set(re.findall(r"^([\w-]+):", makefile, flags=re.M))
    named = {next(a for a in c.argv[1:] if "=" not in a) for c in ALL if c.program == "make" and len(c.argv) > 1}
    for doc in DOCS:
        named |= {m.group(1) for span in inline_code(doc) for m in [re.match(r"make ([\w-]+)$", span)] if m}
    assert len(named) >= 4, named
    missing = named - targets
    assert not missing, f"make targets the docs name but the Makefile lacks: {sorted(missing)}"


# a repository path: under a top-level directory of the repository, a file with a source-like suffix
REPO_PATH = re.compile(r"^(?:fleetbench|collective|parameter_server|datasets|tests|bench|tools|docs)/"
                       r"[\w./-]+\.(?:py|yaml|md|sh)$")
PACKAGE_PATH = re.compile(r"^(?:measure|train|cluster|machine|report|analysis)/[\w/]+\.py$")


def test_every_repository_file_the_docs_name_exists():
    named = {}
    for doc in DOCS:
        spans = inline_code(doc) + [c.text for c in commands_in(doc)]
        for span in spans:
            for token in re.split(r"[\s,()]+", span):
                token = token.strip(".:;'\"")
                if PACKAGE_PATH.match(token):  # `measure/run.py`: short for fleetbench/measure/run.py
                    token = "fleetbench/" + token
                if REPO_PATH.match(token) and not re.search(r"\b[A-Z]{2,}\b", token):  # not datasets/NAME.py
                    named.setdefault(token, doc.relative_to(REPO))
    assert len(named) >= 40, sorted(named)
    missing = {path: str(doc) for path, doc in named.items() if not (REPO / path).exists()}
    assert not missing, f"files the docs name that do not exist (path: doc): {missing}"


# ----------------------------------------------------------------------------------------------
# commands named in prose: their flags exist


def prose_commands() -> list:
    """(doc, help argv, flags) for every `fleetbench SUB ...` span outside code blocks; a data set
    written as alternatives (`criteo|bert`) gives one entry per data set."""
    found = []
    for doc in DOCS:
        for span in inline_code(doc):
            span = re.split(r"\s(?:;|>|&&)\s?|;\s", span)[0]
            if not re.match(r"fleetbench [a-z]", span) or is_output(span):
                continue
            tokens = span.split()
            flags = sorted({f.split("=")[0] for t in tokens for f in t.strip("[]").split("|") if f.startswith("--")})
            if not flags:
                continue
            for prefix in help_prefixes(tokens):
                found.append((str(doc.relative_to(REPO)), span, prefix, flags))
    return found


def help_prefixes(tokens: list) -> list:
    if tokens[1] == "data" and len(tokens) > 3 and tokens[2] in ("gen", "validate", "get"):
        return [["data", tokens[2], name] for name in tokens[3].split("|")]
    if tokens[1] == "results" and len(tokens) > 2 and tokens[2] == "import":
        return [["results", "import"]]
    return [[tokens[1]]]


PROSE = prose_commands()


def test_the_flags_of_commands_named_in_prose_exist():
    assert len(PROSE) >= 15, PROSE
    assert any(p[2] == ["data", "gen", "bert"] for p in PROSE), "README's `data gen ...|bert --out` not found"
    from fleetbench.hosts import launch, remote

    launch_flags = set(launch.PADDLE_FLAGS) | set(launch.OWN_FLAGS) | set(launch.SWITCHES) | set(remote.FLAGS)
    helps, wrong = {}, []
    for doc, span, prefix, flags in PROSE:
        if prefix == ["launch"]:
            wrong += [f"{doc}: `{span}`: {f}" for f in flags if f not in launch_flags]
            continue
        key = tuple(prefix)
        if key not in helps:
            proc = subprocess.run([sys.executable, "-m", "fleetbench", *prefix, "--help"], cwd=REPO, env=env(),
                                  capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, (prefix, proc.stderr)
            helps[key] = set(re.findall(r"--[\w-]+", proc.stdout))
        wrong += [f"{doc}: `{span}`: fleetbench {' '.join(prefix)} has no {f}" for f in flags if f not in helps[key]]
    assert not wrong, "\n".join(wrong)


# ----------------------------------------------------------------------------------------------
# every docs/ path and #anchor named resolves


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its rendered text (code spans and links reduced to their
    text), lower-cased, every character but letters, digits, `_`, `-` and spaces dropped, spaces
    turned into `-`. A `{#id}` after a heading is not rendered as an id: it is text like any other."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    text = re.sub(r"[`*]|(?<!\w)_|_(?!\w)", "", text).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set:
    """The anchors of a markdown file's headings (outside code blocks), duplicates numbered -1, -2."""
    seen, out, fence = collections.Counter(), set(), False
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#{1,6} ", line):
            slug = github_slug(line.lstrip("#"))
            out.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return out


DOC_REF = re.compile(r"(?<![\w/.-])(?:\.\./)*docs/[\w./-]+?\.md(?:#[\w-]+)?|\]\((?!https?:|mailto:)([^)\s#]*)(#[^)\s]*)?\)")


def named_references() -> list:
    """(where, path it resolves to, anchor or '') for every markdown link in the docs, every
    `docs/...md[#anchor]` a doc names in prose, and every one a module of fleetbench/ names."""
    found = []
    sources = DOCS + sorted((REPO / "fleetbench").rglob("*.py"))
    for source in sources:
        for number, line in enumerate(source.read_text().splitlines(), start=1):
            where = f"{source.relative_to(REPO)}:{number}"
            for m in DOC_REF.finditer(line):
                if m.group(0).startswith("]("):
                    if source.suffix != ".md":
                        continue
                    target = (source.parent / m.group(1)).resolve() if m.group(1) else source
                    found.append((where, target, (m.group(2) or "")[1:]))
                else:
                    path, _, anchor = m.group(0).partition("#")
                    found.append((where, (REPO / path.lstrip("./")).resolve(), anchor))
    return found


def test_every_docs_path_and_anchor_named_resolves():
    references = named_references()
    assert len(references) >= 150, f"only {len(references)} references found"
    assert sum(1 for r in references if r[2]) >= 20, "the anchors named are no longer found"
    wrong = []
    for where, target, anchor in references:
        if not target.exists():
            wrong.append(f"{where}: {target.relative_to(REPO) if REPO in target.parents else target}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            wrong.append(f"{where}: {target.relative_to(REPO)}#{anchor}: no heading has that anchor")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("heading, slug", [
    ("What the run layer costs (`bench/overhead.py`)", "what-the-run-layer-costs-benchoverheadpy"),
    ("`fleetbench compare`", "fleetbench-compare"),
    ("Sequence parallelism {#sp}", "sequence-parallelism-sp"),
    ("The launcher–rank contract", "the-launcherrank-contract"),
    ("GEO start-up deadlock", "geo-start-up-deadlock"),
    ("What gloo does with the reducer's all-reduce", "what-gloo-does-with-the-reducers-all-reduce"),
])
def test_anchors_follow_githubs_slugs(heading, slug):
    assert github_slug(heading) == slug


# ----------------------------------------------------------------------------------------------
# the README's quick start, run as shown


def shape(line: str) -> re.Pattern:
    """A documented output line as a pattern: its words as they are, its numbers any numbers, a
    record id any id; in a table row a note in brackets may differ (a run's `disturbed`)."""
    pattern = re.sub(r"(?<![\w.])\d+(?:\\\.\d+)?(?![\w.])", r"[\\d.]+", re.escape(line))
    pattern = re.sub(r"(?<=id\\ )[0-9a-f]{6,}", "[0-9a-f]+", pattern)
    if line.startswith("|"):
        pattern = re.sub(r"\\ \\\(.*?\\\)", r"(?:\\ \\(.*?\\))?", pattern)
    return re.compile(pattern)


def run_as_shown(command: DocCommand, cwd: Path) -> subprocess.CompletedProcess:
    """The command verbatim but for its program (this interpreter) and the repository's scripts."""
    argv = [sys.executable, "-m", "fleetbench"] if command.program == "fleetbench" else [sys.executable]
    argv += [str(REPO / a) if (REPO / a).is_file() and a.endswith(".py") else a for a in command.argv[1:]]
    return subprocess.run(argv, cwd=cwd, env=env(), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)


@pytest.fixture(scope="module")
def quick_start_run(tmp_path_factory):
    """The quick start on any machine, in an empty directory: every command after `make install`
    (this test runs in the virtualenv it makes), in order; each with what it printed."""
    cwd = tmp_path_factory.mktemp("quick-start")
    cpu, _gpu = quick_start()
    done = []
    for command in cpu:
        if command.program == "make":
            assert command.argv[1:] == ("install",), command.text
            continue
        proc = run_as_shown(command, cwd)
        assert proc.returncode == 0, f"{command.where}: {command.text}\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}"
        done.append((command, (proc.stdout + proc.stderr).splitlines()))
    return done


def test_the_readme_quick_start_runs_and_prints_what_it_shows(quick_start_run):
    assert [c.subcommand for c, _ in quick_start_run] == ["launch", "report"]
    for command, printed in quick_start_run:
        for line in command.output:
            if line in ("...", "…") or line.startswith("fleetbench result:"):
                continue  # elided; the summary line has a test of its own below
            assert any(shape(line).fullmatch(p.strip()) for p in printed), \
                f"{command.where}: documented {line!r}, not printed in that shape:\n" + "\n".join(printed[-30:])


def test_the_readme_quick_start_run_ends_with_its_summary_line(quick_start_run):
    # needs `fleetbench launch`'s summary line (the `fleetbench result:` line every run prints)
    command, printed = quick_start_run[0]
    (shown,) = [line for line in command.output if line.startswith("fleetbench result:")]
    got = [p for p in printed if p.startswith("fleetbench result:")]
    assert len(got) == 1 and shape(shown).fullmatch(got[0]), f"documented {shown!r}, printed {got}"


@pytest.mark.parametrize("line, printed, matches", [
    ("step 12/12 loss 2.4808 ips 5.7 images/s", "step 12/12 loss 3.1 ips 11 images/s", True),
    ("resnet50 tiny 1x2 mgwfbp | 13.23 images/s | x.jsonl id 9c3e6c24", "resnet50 tiny 1x2 mgwfbp | 9 images/s | x.jsonl id 0a1b2c3d", True),
    ("resnet50 tiny 1x2 mgwfbp", "resnet50 tiny 1x4 mgwfbp", False),
    ("| — | mgwfbp | 13.23 (all 1 runs disturbed: no undisturbed figure) MFU 2.4% |", "| — | mgwfbp | 13.2 MFU 2.5% |", True),
    ("| — | mgwfbp | 13.23 MFU 2.4% |", "| — | bsp | 13.2 MFU 2.5% |", False),
])
def test_an_output_shape_is_its_words_with_any_numbers(line, printed, matches):
    assert bool(shape(line).fullmatch(printed)) is matches


# ----------------------------------------------------------------------------------------------
# guides and reference say how things are; the validation log says what happened when


def test_guides_and_reference_carry_no_issue_numbers_dates_or_unnamed_sources():
    wrong = []
    for doc in sorted((REPO / "docs" / "guide").glob("*.md")) + sorted((REPO / "docs" / "reference").glob("*.md")):
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
        text = re.sub(r"`[^`\n]+`|\]\([^)]*\)", "", text)  # file names and commands may hold a date
        for line in text.splitlines():
            for match in re.finditer(r"\bissue \d+|\b20\d\d-\d\d-\d\d\b|\bthe seeds\b", line):
                wrong.append(f"{doc.relative_to(REPO)}: {match.group(0)!r} in: {line.strip()[:120]}")
    assert not wrong, "history belongs in docs/validation/ and commit messages:\n" + "\n".join(wrong)
