"""What every command line shares: one parser class, the kinds of value a flag takes, and the
checks of the paths a command will write or read.

Every subcommand (and a benchmark script's run layer, train/run.py) builds its parser with
`Parser`: a mistake is one line on stderr, `PROG: error: FLAG VALUE: expected WHAT`, and exit 2;
the usage is for --help, not printed before every error. What the parser cannot see (a file's
content, a record, a filter's match) is refused the same way: the error is a `UserError`, and
`refusing(PROG)` around a command (or `refused(PROG, error)`) prints `PROG: error: LINE`, exit 2. A flag says what it takes with a `Kind`
(`type=cmdline.COUNT`), which converts the text or refuses it in those words and lists inputs it
refuses: tests/unit/test_bad_input.py tries each of them on every flag that declares the kind, so
a new flag is covered by the kind it declares. Paths a command will write are tried for real
before anything runs (creating and removing a file where the output would go): for root,
access() says yes to anything, even under /proc.
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

# Placeholders in a Kind's `bad` inputs, filled in by the bad-input matrix with real paths.
MISSING, DIRECTORY, CORRUPT, UNWRITABLE = "{missing}", "{directory}", "{corrupt}", "/proc/nope/x"


class Refused(argparse.ArgumentTypeError):
    """A value a Kind refuses; str() is `VALUE: why`, the flag is added by the parser."""


class UserError(ValueError):
    """A refusal of what the user gave (a flag's value, a file, a record, a filter), in one line
    that names it and says what was expected: the base of every such error, so that a command
    catches one type (`refusing`) and anything else, a bug, keeps its traceback."""


def refused(prog: str, error: Exception | str) -> int:
    """`PROG: error: LINE` on stderr; the exit status of a refusal, 2."""
    print(f"{prog}: error: {error}", file=sys.stderr)
    return 2


def refusing(prog: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """A command's `cli(argv) -> int` whose UserError is its one line (`refused`) and exit 2."""
    def wrap(command: Callable[..., int]) -> Callable[..., int]:
        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> int:
            try:
                return command(*args, **kwargs)
            except UserError as error:
                return refused(prog, error)
        return run
    return wrap


@dataclasses.dataclass(frozen=True)
class Kind:
    """A flag's type that says what it accepts. `convert(text)` returns the value, or raises
    Refused (its own words) or ValueError/TypeError (then: `'TEXT': expected EXPECTED`)."""
    expected: str
    convert: Callable[[str], Any]
    bad: tuple = ()  # inputs it refuses, for the bad-input matrix (placeholders above)

    def __call__(self, text: str) -> Any:
        try:
            return self.convert(text)
        except Refused:
            raise
        except (ValueError, TypeError, ArithmeticError):
            raise Refused(f"{text!r}: expected {self.expected}") from None

    @property
    def __name__(self) -> str:  # argparse names a type by it in messages we never show
        return self.expected


def integer(low: int | None = None, high: int | None = None) -> Kind:
    """An integer within [low, high]."""
    words = ("an integer" + (f" >= {low}" if low is not None and high is None else "")
             + (f" from {low} to {high}" if low is not None and high is not None else ""))

    def convert(text: str) -> int:
        value = int(str(text).strip(), 10)
        if (low is not None and value < low) or (high is not None and value > high):
            raise ValueError(text)
        return value
    bad = ["abc", "", "1.5"] + ([str(low - 1)] if low is not None else []) + ([str(high + 1)] if high else [])
    if low is not None and low > 0:
        bad.append(str(-low))
    return Kind(words, convert, tuple(dict.fromkeys(bad)))


def number(low: float = 0.0, high: float | None = None, low_included: bool = False,
           high_included: bool = True) -> Kind:
    """A finite number above `low` (or from it, with low_included), up to `high` (below it, without
    high_included)."""
    words = f"a number {'>=' if low_included else '>'} {low:g}" + (
        f" and {'<=' if high_included else '<'} {high:g}" if high is not None else "")

    def convert(text: str) -> float:
        value = float(str(text).strip())
        if not math.isfinite(value) or value < low or (value == low and not low_included) \
                or (high is not None and (value > high or value == high and not high_included)):
            raise ValueError(text)
        return value
    bad = ["abc", "", "nan", "inf", str(low - 1)] + ([] if low_included else [f"{low:g}"])
    bad += [] if high is None else [f"{high * 2 + 1:g}"] + ([] if high_included else [f"{high:g}"])
    return Kind(words, convert, tuple(bad))


def _nonempty(text: str) -> str:
    if not str(text).strip():
        raise ValueError(text)
    return text


COUNT = integer(1)                  # processes, nodes, repeats, examples, rows ...
NON_NEGATIVE = integer(0)           # indices, optional extras (0 = none)
SEED = integer(0, 2**32 - 1)        # numpy's and Paddle's seeds
PORT = integer(1, 65535)
SECONDS = number(0.0)               # timeouts, stall windows, probe durations
FRACTION = number(0.0, 1.0)         # a share in (0, 1]
TEXT = Kind("a non-empty value", _nonempty, ("", " "))


# ---------------------------------------------------------------------------------------------
# paths


def _creatable_in(path: str) -> str | None:
    """Why no file can be created where `path` would go (its nearest existing ancestor), or None.
    Tried for real: a file created and removed there."""
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent) and os.path.dirname(parent) != parent:  # the rest is made
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"{parent} is not a directory"
    try:
        before = os.stat(parent)
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".fleetbench-probe-")
        os.close(fd)
        os.unlink(probe)
        os.utime(parent, ns=(before.st_atime_ns, before.st_mtime_ns))  # a re-run leaves mtimes alone
    except OSError as e:
        return f"cannot create files in {parent} ({e.strerror or e})"
    return None


def output_file_problem(path: str, what: str = "a file") -> str | None:
    """Why `path` cannot be written as a file (created, or replaced), or None. Creates nothing."""
    if not str(path).strip():
        return f"expected {what} path"
    if os.path.isdir(path):
        return f"is a directory, expected {what}"
    if os.path.exists(path):
        try:
            open(path, "ab").close()  # opening for append writes nothing
        except OSError as e:
            return f"cannot write it ({e.strerror or e})"
        return None
    return _creatable_in(path)


def output_dir_problem(path: str) -> str | None:
    """Why files cannot be written into directory `path` (made if missing), or None."""
    if not str(path).strip():
        return "expected a directory path"
    if os.path.exists(path) and not os.path.isdir(path):
        return "is not a directory"
    return _creatable_in(os.path.join(path, "x"))


def input_file_problem(path: str) -> str | None:
    if not str(path).strip():
        return "expected a file path"
    if os.path.isdir(path):
        return "is a directory, expected a file"
    try:
        open(path, "rb").close()
    except OSError as e:
        return f"cannot read it ({e.strerror or e})"
    return None


class PathProblem(UserError):
    """One line naming the flag, the path and why it cannot be used."""


def check_output_file(path: str, flag: str, what: str = "a file") -> None:
    problem = output_file_problem(path, what)
    if problem:
        raise PathProblem(f"{flag} {path}: {with_expected(problem, what + ' it can write')}")


def check_output_dir(path: str, flag: str) -> None:
    problem = output_dir_problem(path)
    if problem:
        raise PathProblem(f"{flag} {path}: {with_expected(problem, 'a directory it can write into')}")


def with_expected(why: str, expected: str) -> str:
    """`why`, saying what was expected unless it does."""
    return why if "expected" in why else f"{why} (expected {expected})"


def _path_kind(problem: Callable[[str], str | None], expected: str, bad: tuple) -> Kind:
    def convert(text: str) -> str:
        why = problem(text)
        if why:
            raise Refused(f"{text if text else repr(text)}: {with_expected(why, expected)}")
        return text
    return Kind(expected, convert, bad)


OUTPUT_FILE = _path_kind(output_file_problem, "a file it can write", ("", DIRECTORY, UNWRITABLE))
OUTPUT_DIR = _path_kind(output_dir_problem, "a directory it can write into", ("", CORRUPT, UNWRITABLE + "/d"))
INPUT_FILE = _path_kind(input_file_problem, "a file it can read", ("", MISSING, DIRECTORY))
EXISTING = _path_kind(lambda p: None if p and os.path.exists(p) else "no such file or directory",
                      "a file or directory that exists", ("", MISSING))


# ---------------------------------------------------------------------------------------------
# the parser


class Parser(argparse.ArgumentParser):
    """argparse's parser, with every error one line (see the module docstring)."""

    def error(self, message: str) -> NoReturn:
        required = re.fullmatch(r"the following arguments are required: (.*)", message)
        if required:  # say what each missing one takes
            wanted = [self._wanted(name) for name in required.group(1).split(", ")]
            message = f"missing {required.group(1)} (expected {'; '.join(wanted)}; see {self.prog} --help)"
        self.exit(2, f"{self.prog}: error: {one_line(message, self.prog)}\n")

    def _wanted(self, name: str) -> str:
        for action in self._actions:
            if name in action.option_strings or name in (action.dest, action.metavar):
                if action.choices:
                    return "one of " + ", ".join(map(str, action.choices))
                kind = action.type.expected if isinstance(action.type, Kind) else None
                return kind or action.metavar or action.dest.upper()
        return name

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None):
        args = sys.argv[1:] if args is None else list(args)
        return super().parse_known_args(self._dash_values(args), namespace)

    def _dash_values(self, args: list[str]) -> list[str]:
        """`--rate -5gbit` as `--rate=-5gbit`: argparse takes a value that starts with '-' for an
        unknown flag and says "expected one argument", which names neither the value nor what
        was expected; the flag's own check then says both."""
        takes_one = {s for a in self._actions if a.nargs is None and a.option_strings
                     for s in a.option_strings}
        known = {s for a in self._actions for s in a.option_strings}
        out, i = [], 0
        while i < len(args):
            token = args[i]
            following = args[i + 1] if i + 1 < len(args) else None
            if token == "--":
                return out + args[i:]
            if token in takes_one and following and following.startswith("-") and following != "--" \
                    and following.split("=", 1)[0] not in known and not self._negative_number_matcher.match(following):
                out.append(f"{token}={following}")
                i += 2
                continue
            out.append(token)
            i += 1
        return out


_TYPE_WORDS = {"int": "an integer", "float": "a number"}
# how argparse's own messages about an argument begin; anything else is a Kind's `VALUE: why`
_ARGPARSE_PHRASES = ("expected", "not allowed", "ignored explicit", "one of the arguments", "invalid")


def one_line(message: str, prog: str = "fleetbench") -> str:
    """argparse's message in our form: `FLAG VALUE: expected WHAT`, on one line."""
    message = " ".join(str(message).split())
    m = re.fullmatch(r"argument ([^:]+): (.*)", message)
    if m:
        flag = next((f for f in m.group(1).split("/") if f.startswith("--")), m.group(1).split("/")[0])
        rest = m.group(2)
        invalid = re.fullmatch(r"invalid (\w+) value: (.*)", rest)
        choice = re.fullmatch(r"invalid choice: (.*?) \(choose from (.*)\)", rest)
        if invalid:
            rest = f"{invalid.group(2)}: expected {_TYPE_WORDS.get(invalid.group(1), invalid.group(1))}"
        elif choice:
            rest = f"{choice.group(1)}: expected one of {choice.group(2).replace(chr(39), '')}"
        elif rest.startswith("ignored explicit argument "):
            return f"{flag} {rest.split(' ', 3)[3]}: expected no value ({flag} is a switch)"
        elif rest.startswith("not allowed with argument "):
            return f"{flag}: not allowed with {rest.split()[-1]} (expected one of them)"
        elif rest == "expected one argument":
            return f"{flag}: expected a value (write {flag}=VALUE for one that starts with '-')"
        return f"{flag}: {rest}" if rest.startswith(_ARGPARSE_PHRASES) else f"{flag} {rest}"
    if message.startswith("unrecognized arguments:"):
        return f"{message} (see {prog} --help)"
    return message
