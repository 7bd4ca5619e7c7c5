#!/usr/bin/env python3
"""Where `make test`'s time goes: sums the JUnit XML files tools/test.sh leaves in log/ by test file.

    python3 tools/test_times.py [log/*.xml]     # one line per file, slowest first, per session
Why: the 20-minute budget is kept by moving and trimming whole files between tools/test.sh's
sessions, and pytest's --durations lists only single tests. The CPU column (each test's own and
its subprocesses', tests/conftest.py) says what two cores must share: sessions side by side only
help while their sum of CPU fits.
"""
from __future__ import annotations

import collections
import glob
import sys
import xml.etree.ElementTree as ET


def file_times(path: str) -> tuple[float, dict[str, tuple[float, int, float]]]:
    """(the session's wall time, {test file: (seconds, tests, CPU seconds)}) from one JUnit XML
    file; CPU from each test's `cpu_s` property (tests/conftest.py), 0 where absent."""
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    by_file: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for case in suite.iter("testcase"):
        # classname is the dotted module path (tests.job.test_launch), then any class
        module = case.get("classname", "").split(".")
        while module and module[-1][:1].isupper():
            module.pop()
        cpu = sum(float(p.get("value", 0)) for p in case.iter("property") if p.get("name") == "cpu_s")
        by_file["/".join(module) + ".py"].append((float(case.get("time", 0)), cpu))
    return float(suite.get("time", 0)), {f: (sum(t for t, _ in v), len(v), sum(c for _, c in v))
                                         for f, v in by_file.items()}


def main(paths: list[str]) -> int:
    for path in paths or sorted(glob.glob("log/*.xml")):
        wall, files = file_times(path)
        print(f"{path}: {wall:.0f} s wall, {sum(v[0] for v in files.values()):.0f} s in tests, "
              f"{sum(v[2] for v in files.values()):.0f} CPU s")
        for name, (secs, n, cpu) in sorted(files.items(), key=lambda kv: -kv[1][0])[:25]:
            print(f"  {secs:7.1f} s {cpu:7.1f} CPU s {n:4d} tests  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
