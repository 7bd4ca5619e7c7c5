"""tools/fresh_machine.sh refuses bad flags in one line (exit 2) before it makes anything; its steps
and what they run are what docs/testing.md says. The check itself makes a machine (minutes): it is run
by hand and before resolving set-up changes, not here."""
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "fresh_machine.sh"


@pytest.mark.parametrize("args, named", [
    (["--runs", "0"], "--runs 0: expected a count of 1 or more"),
    (["--runs", "two"], "--runs two: expected a count"),
    (["--steps", "test,deploy"], "deploy: expected test, test-again, demo-user, demo, look or shell"),
    (["--rev", "no-such-commit-anywhere"], "--rev no-such-commit-anywhere: not a commit"),
    (["--fast"], "--fast: expected --runs N"),
    (["--steps", "shell"], "--steps shell: expected --shell CMD too"),
])
def test_bad_flags_are_one_line_before_anything_is_made(tmp_path, args, named):
    p = subprocess.run(["bash", str(SCRIPT), *args, "--dir", str(tmp_path / "fresh")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == "", (p.stdout, p.stderr)
    assert len(p.stderr.strip().splitlines()) == 1 and named in p.stderr, p.stderr
    assert not (tmp_path / "fresh").exists()


def test_the_documented_steps_are_the_scripts():
    doc = (REPO / "docs" / "testing.md").read_text()
    text = SCRIPT.read_text()
    for step in ("test", "test-again", "demo-user", "demo", "look", "shell"):
        assert f"#   {step} " in text.replace(f"#   {step}\t", f"#   {step} ")
    assert "tools/fresh_machine.sh --runs 2 --steps test" in doc and "make test-fresh" in doc
    assert "bash tools/fresh_machine.sh" in (REPO / "Makefile").read_text()
