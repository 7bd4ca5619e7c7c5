"""The README's benchmark list is the registry's (fleetbench/measure/registry.py): the table of
"Benchmarks" names every registered script and nothing else, each with its registered unit, so
adding a benchmark without its README line fails here."""
import re

from util import REPO

from fleetbench.measure import registry

README = (REPO / "README.md").read_text()
SCRIPT_DIRS = sorted({b.script.split("/")[0] for b in registry.REGISTERED})


def section(heading: str) -> str:
    return README.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def benchmark_rows() -> dict:
    """{script: the row's unit cell} of the README's table of benchmarks."""
    rows = {}
    for line in section("Benchmarks").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) >= 3:
            rows.update({script: cells[2] for script in re.findall(r"`([\w/]+\.py)`", cells[0])})
    return rows


def table_problems(registered) -> list:
    """What the table of benchmarks says otherwise than `registered`: scripts missing or extra,
    units not in their row."""
    rows, scripts = benchmark_rows(), {b.script for b in registered}
    found = [f"{s}: registered, not in the table" for s in sorted(scripts - set(rows))]
    found += [f"{s}: in the table, not registered" for s in sorted(set(rows) - scripts)]
    return found + [f"{b.script}: unit {b.unit} not in its row ({rows[b.script]!r})"
                    for b in registered if b.script in rows and b.unit not in rows[b.script]]


def test_the_benchmarks_table_names_every_registered_script_with_its_unit():
    assert len(benchmark_rows()) >= 10
    assert table_problems(registry.REGISTERED) == []


def test_the_script_directories_hold_registered_benchmarks_only():
    on_disk = sorted(str(p.relative_to(REPO)) for d in SCRIPT_DIRS for p in (REPO / d).glob("*.py"))
    assert on_disk == sorted(b.script for b in registry.REGISTERED)


def test_a_registered_script_the_lists_lack_or_a_wrong_unit_is_reported():
    extra = registry.Benchmark("t5", "collective/t5.py", "collective", "tokens/s")
    assert table_problems(registry.REGISTERED + (extra,)) == ["collective/t5.py: registered, not in the table"]
    relabelled = [registry.Benchmark(b.name, b.script, b.family, "samples/s" if b.name == "vgg16" else b.unit)
                  for b in registry.REGISTERED]
    assert table_problems(relabelled) == [
        "collective/vgg16.py: unit samples/s not in its row ('images/s')"]
    assert table_problems(registry.REGISTERED[1:]) == ["collective/resnet50.py: in the table, not registered"]
