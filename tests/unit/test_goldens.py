"""The commands that read stored records print what tests/golden/ holds, byte for byte
(tools/goldens.py writes them; a redesign regenerates one only in a commit that says why). A
representative subset runs here, one test per golden so a failure names it; `python
tools/goldens.py --check` runs all of them (every reference table's explain, ~50 CPU s)."""
import subprocess
import sys

import pytest

from util import REPO

SUBSET = ["explain-ddl-benchmarks-2020-05-29.txt", "explain-predict-grid.txt", "explain-dle-paddle-bert-dgxa100.json",
          "explain-fleetx-paddle-rn50.txt", "explain-dle-pytorch-rn50.txt", "explain-measured.json",
          "plan-validate.json", "plan-gpt3-175b-1024.txt", "plan-llama7b-64.txt", "report.json",
          "report-readme.md", "compare-versions.txt", "history.json", "diagnose-judging.json"]


@pytest.mark.parametrize("name", SUBSET)
def test_the_golden_output_is_unchanged(name):
    done = subprocess.run([sys.executable, "tools/goldens.py", "--check", name], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_every_golden_the_tool_names_is_stored_and_every_stored_one_named():
    done = subprocess.run([sys.executable, "tools/goldens.py", "--list"], cwd=REPO, capture_output=True, text=True)
    named = {line.split()[0] for line in done.stdout.splitlines()}
    assert named == {p.name for p in (REPO / "tests" / "golden").iterdir()}
    assert set(SUBSET) <= named
