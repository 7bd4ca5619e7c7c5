"""`fleetbench report`: tables equal the published ddl-benchmarks table, charts come with the CSV
of their numbers, README regeneration touches only the marked section, output is reproducible."""
import csv
import hashlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fleetbench.machine import stamp
from fleetbench.measure import contract
from fleetbench.report import generate
from fleetbench.store import results

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "results" / "reference" / "ddl-benchmarks-2020-05-29.jsonl"
# The published table as fetched (HKBU-HPML/ddl-benchmarks, results/2020-05-29/README.md), kept
# beside its converter so a fresh clone checks every cell against it.
SEED = REPO / "results" / "reference" / "ddl_benchmarks_results_2020-05-29.md"
README = f"# Title\n\nintro text\n\n{generate.BEGIN}\nold generated text\n{generate.END}\n\n## After\nkept\n"


def digest(directory: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


@pytest.fixture(scope="module")
def reference_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("ref")
    (root / "README.md").write_text(README)
    assert generate.cli([str(REFERENCE), "--images", str(root / "images"),
                     "--readme", str(root / "README.md")]) == 0
    return root


# ---- the published table, cell by cell --------------------------------------------------------

def published_rows():
    """The seed table parsed here, independently of the converter."""
    rows = []
    for line in SEED.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0] not in ("DNN", "") and not cells[0].startswith("-"):
            rows.append(cells)
    return rows


def generated_tables(markdown: str) -> dict:
    """{benchmark: {(network, method): {devices: (mean, std)}}} from the generated section."""
    tables, bench, header = {}, None, None
    for line in markdown.splitlines():
        if line.startswith("### "):
            bench, header = line[4:].split(" ")[0], None
            tables[bench] = {}
        elif line.startswith("| Network"):
            header = [int(c.split()[0]) for c in line.strip("| \n").split(" | ")[2:]]
        elif line.startswith("|") and not line.startswith("|---") and header:
            network, method, *values = [c.strip() for c in line.strip().strip("|").split("|")]
            row = tables[bench].setdefault((network, method), {})
            for devices, text in zip(header, values):
                if text:
                    match = re.match(r"^([\d.]+)(?: ± ([\d.]+))?", text)
                    row[devices] = (float(match[1]), match[2] and float(match[2]))
    return tables


def test_generated_table_equals_published_table_cell_by_cell(reference_report):
    tables = generated_tables((reference_report / "README.md").read_text())
    benchmarks = {"ResNet-50": "resnet50", "BERT-Large": "bert_large", "BERT-Base": "bert_base"}
    networks = {"10GbE with TCP/IP": "10gbe", "100GbIB with RDMA": "100gbib-rdma",
                "100GbE with TCP/IP": "100gbe"}
    compared = 0
    for dnn, _bs, connection, method, baseline, *values in published_rows():
        table = tables[benchmarks[dnn]]
        assert table[("—", "single")] == {1: (float(baseline), None)}
        row = table[(networks[connection], method)]
        assert sorted(row) == [4, 8, 16, 32]
        for devices, value in zip((4, 8, 16, 32), values):
            mean, std = (float(x) for x in value.split("+-"))
            assert row[devices] == (mean, std), (dnn, connection, method, devices)
            compared += 1
    assert compared == 63 * 4
    assert sum(len(t) for t in tables.values()) == 63 + 3  # nothing extra either


def test_nine_method_charts_and_their_csvs(reference_report):
    images = reference_report / "images"
    scaling = sorted(p.stem for p in images.glob("*.png") if "-networks-" not in p.stem)
    assert scaling == sorted(f"ddl-benchmarks-2020-05-29-{b}-{n}" for b in
                             ("resnet50", "bert_large", "bert_base")
                             for n in ("10gbe", "100gbib-rdma", "100gbe"))
    with open(images / "ddl-benchmarks-2020-05-29-resnet50-10gbe.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 7 * 4
    first = rows[0]
    assert (first["series"], first["world_size"], first["mean"], first["std"]) == \
        ("BSP-A2A", "4", "925.02", "4.42")
    assert float(first["ideal"]) == pytest.approx(4 * 253.1)  # the published 1-GPU baseline
    assert float(first["efficiency"]) == pytest.approx(925.02 / (4 * 253.1))


# ---- README section and reproducibility --------------------------------------------------------

def test_readme_only_the_marked_section_changes_and_rerun_is_idempotent(reference_report):
    text = (reference_report / "README.md").read_text()
    head, rest = text.split(generate.BEGIN + "\n", 1)
    section, tail = rest.split(generate.END, 1)
    assert head == "# Title\n\nintro text\n\n" and tail == "\n\n## After\nkept\n"
    assert "old generated text" not in section
    assert "![ddl-benchmarks-2020-05-29-resnet50-10gbe](images/ddl-benchmarks-2020-05-29-resnet50-10gbe.png)" in section

    before = digest(reference_report / "images")
    mtimes = {p: p.stat().st_mtime_ns for p in reference_report.rglob("*")}
    assert generate.cli([str(REFERENCE), "--images", str(reference_report / "images"),
                     "--readme", str(reference_report / "README.md")]) == 0
    assert (reference_report / "README.md").read_text() == text
    assert digest(reference_report / "images") == before
    assert {p: p.stat().st_mtime_ns for p in reference_report.rglob("*")} == mtimes


def test_a_second_process_writes_byte_identical_files(reference_report, tmp_path):
    (tmp_path / "README.md").write_text(README)
    subprocess.run([sys.executable, "-m", "fleetbench", "report", str(REFERENCE), "--images",
                    "images", "--readme", "README.md"], cwd=tmp_path, check=True, timeout=120,
                   env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True)
    assert digest(tmp_path / "images") == digest(reference_report / "images")
    assert (tmp_path / "README.md").read_bytes() == (reference_report / "README.md").read_bytes()


def test_missing_markers_is_an_error_and_nothing_is_written(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text("# Title\nno markers here\n")
    code = generate.cli([str(REFERENCE), "--images", str(tmp_path / "images"), "--readme", str(readme)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err.startswith(f"fleetbench report: {readme}: expected one line '{generate.BEGIN}'")
    assert readme.read_text() == "# Title\nno markers here\n"
    assert not (tmp_path / "images").exists()


def test_invalid_record_stops_report_with_file_and_line(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    good = measured(1, 10.0)
    bad = measured(2, 12.0)
    del bad["metrics"]["unit"]
    path.write_text(results.dumps(good) + "\n" + results.dumps(bad) + "\n")
    assert generate.cli([str(path), "--images", str(tmp_path / "images")]) == 2
    assert capsys.readouterr().err.strip() == \
        f"fleetbench report: {path}:2: metrics.unit: missing (expected one of " \
        f"{', '.join(results.UNITS)})"


# ---- our own measured records -------------------------------------------------------------------

def measured(world, throughput, method="allreduce", network=None, error=None):
    return stamp.record(contract.RunIdentity(benchmark="resnet50", mode="collective", method=method,
                                             preset="tiny", config={"batch_size": 8},
                                             nodes=1 if network is None else world, world_size=world,
                                             devices_per_node=world if network is None else 1,
                                             network=network), None if error else {"throughput": throughput, "unit": "images/s"}, error)


def test_measured_report_labels_efficiency_from_measured_baseline(tmp_path, capsys):
    records = [measured(1, 40.0), measured(1, 44.0), measured(2, 78.0), measured(2, 80.0),
               measured(2, 0, error="RuntimeError: boom"),
               measured(1, 41.0, "fused_allreduce"), measured(2, 81.0, "fused_allreduce")]
    only_failed = measured(1, 0, error="RuntimeError: out of memory")
    only_failed["benchmark"] = "vgg16"
    records.append(only_failed)
    path = tmp_path / "runs.jsonl"
    for record in records:
        results.append(str(path), record)
    assert generate.cli([str(path), "--images", str(tmp_path / "images")]) == 0
    markdown = capsys.readouterr().out
    # 79 / (2 x 42) = 0.94: the baseline is the mean of this file's own 1-device runs
    # digits the std supports; efficiency ± from both means' standard errors; 40/44 is cv 7 %: unstable
    assert "| — | allreduce | 42 ± 3 ! n=2 | 79.0 ± 1.4 (1.88x, 94 ± 5%) n=2 +1 failed |" in markdown
    assert "- allreduce, world size 1: ! unstable: cv 7% > 5%; runs in images/s: 40 [" in markdown
    assert "| — | fused_allreduce | 41 n=1 | 81 (1.98x, 99%) n=1 |" in markdown
    assert "1 failed run(s) are counted, not averaged" in markdown
    assert "All 1 run(s) of this benchmark failed" in markdown  # failures are results too
    assert "| — | allreduce | failed ×1 |" in markdown
    (png,) = (tmp_path / "images").glob("*.png")
    assert png.name == "resnet50-tiny-local.png"
    with open(png.with_suffix(".csv")) as handle:
        rows = {(r["series"], r["world_size"]): r for r in csv.DictReader(handle)}
    assert float(rows[("allreduce", "2")]["mean"]) == 79.0
    assert float(rows[("allreduce", "2")]["ideal"]) == 84.0


def test_reference_file_is_exactly_what_the_converter_makes_of_the_seed(capsys):
    import runpy
    converter = runpy.run_path(str(REPO / "fleetbench" / "perfmodel" / "sources" / "ddl_benchmarks.py"))
    assert converter["main"]([str(SEED)]) == 0
    assert capsys.readouterr().out == REFERENCE.read_text()


# ---- runs that are not the same experiment are never pooled --------------------------------------

def versioned(world, throughput, version, batch=8, seed=1):
    record = measured(world, throughput)
    record["env"]["paddle"].update(version=version, commit=f"{version}-commit")
    record["config"].update(batch_size=batch, seed=seed)
    return record


def test_report_json_gives_two_versions_by_two_batch_sizes_as_four_groups(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "runs.jsonl"
    for version, base in (("2.6.2", 40.0), ("3.3.1", 50.0)):
        for batch in (8, 16):
            for seed in (1, 2):  # repeats differ in seed only
                results.append(str(path), versioned(1, base + batch + seed, version, batch, seed))
    assert generate.cli([str(path), "--json"]) == 0
    groups = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert sorted((g["paddle"].split()[0], g["config"]["batch_size"], g["n"], g["mean"], g["unit"])
                  for g in groups) == [("2.6.2", 8, 2, 49.5, "images/s"),
                                       ("2.6.2", 16, 2, 57.5, "images/s"),
                                       ("3.3.1", 8, 2, 59.5, "images/s"),
                                       ("3.3.1", 16, 2, 67.5, "images/s")]
    for g in groups:
        assert g["std"] == pytest.approx(0.7071067811865476) and g["noise_differs"] == ["seed"]
        assert {"benchmark", "preset", "method", "network", "world_size", "device", "host"} <= set(g)
    assert not (tmp_path / "images").exists()  # --json draws nothing, and refuses to be given where:
    with pytest.raises(SystemExit) as exit_:
        generate.cli([str(path), "--json", "--images", str(tmp_path / "images")])
    assert exit_.value.code == 2 and "--images: not read with --json" in capsys.readouterr().err


def test_two_paddle_versions_are_side_by_side_in_table_chart_and_csv(tmp_path, capsys):
    path = tmp_path / "runs.jsonl"
    for version, speed in (("2.6.2", 40.0), ("3.3.1", 60.0)):
        for world, factor in ((1, 1.0), (2, 1.5)):
            results.append(str(path), versioned(world, speed * factor, version))
    assert generate.cli([str(path), "--images", str(tmp_path / "images")]) == 0
    markdown = capsys.readouterr().out
    assert "| Network | Method | Paddle | 1 device | 2 devices |" in markdown
    # each version scales against its own 1-device run: 60/40 and 90/60, both 1.50x
    assert "| — | allreduce | 2.6.2 CPU 2.6.2-c | 40 | 60 (1.50x, 75%) |" in markdown
    assert "| — | allreduce | 3.3.1 CPU 3.3.1-c | 60 | 90 (1.50x, 75%) |" in markdown
    assert "Rows differ in Paddle: different experiments, shown side by side, never averaged." in markdown
    (png,) = (tmp_path / "images").glob("*.png")
    with open(png.with_suffix(".csv")) as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["series"], r["Paddle"], r["world_size"], float(r["mean"])) for r in rows] == [
        ("allreduce Paddle 2.6.2 CPU 2.6.2-c", "2.6.2 CPU 2.6.2-c", "1", 40.0),
        ("allreduce Paddle 2.6.2 CPU 2.6.2-c", "2.6.2 CPU 2.6.2-c", "2", 60.0),
        ("allreduce Paddle 3.3.1 CPU 3.3.1-c", "3.3.1 CPU 3.3.1-c", "1", 60.0),
        ("allreduce Paddle 3.3.1 CPU 3.3.1-c", "3.3.1 CPU 3.3.1-c", "2", 90.0)]


# ---- captions: the lines matplotlib's wrap=True makes, measured once -------------------------------

WORDS = ("error bars: std; labels: speedup and efficiency vs 1 node 'bsp' run = 812.3 ± 4.1 images/s "
         "(from these results); UNSTABLE: mgwfbp 1gbe at 4 (cv 7.9% over 5 runs, above 5%)").split(" ")
CAPTIONS = [
    "short",
    " ".join(WORDS),
    " ".join(WORDS * 3),
    "one_word_far_wider_than_any_figure_" * 12 + " then short words after it",
    " ".join(WORDS[:9]) + "\n" + " ".join(WORDS[9:]),  # a newline of its own breaks the line there
    "two  spaces,   three,\n\nand an empty line",
]


@pytest.mark.parametrize("x, fontsize", [(0.01, 7), (0.075, 7), (0.5, 9), (0.9, 6)])
def test_wrapped_text_draws_what_matplotlibs_wrap_draws(x, fontsize):
    """style.wrapped_text is the cheap form of fig.text(wrap=True) (report's captions): the same
    lines, so the same pixels, for captions short, long, with an overlong word, newlines, runs of
    spaces, at several positions and font sizes."""
    from fleetbench.report import style

    def png(draw) -> bytes:
        with style.matplotlib.rc_context(style.STYLE):
            fig = style.Figure(figsize=style.FIGSIZE, dpi=style.DPI)
            draw(fig)
            buffer = io.BytesIO()
            fig.savefig(buffer, **style.SAVE)
        return buffer.getvalue()

    for caption in CAPTIONS:
        ours = png(lambda fig: style.wrapped_text(fig, x, 0.005, caption, fontsize=fontsize, ha="left", va="bottom"))
        theirs = png(lambda fig: fig.text(x, 0.005, caption, fontsize=fontsize, ha="left", va="bottom", wrap=True))
        assert ours == theirs, (x, fontsize, caption[:40])


def test_without_images_the_charts_go_to_report_not_the_checkouts_tracked_images(tmp_path, monkeypatch, capsys):
    """`fleetbench report FILE` (no --images) in a checkout changes no tracked file: its charts go
    to ./report (in .gitignore), and only `make demo`'s explicit --images images writes images/."""
    monkeypatch.chdir(tmp_path)
    assert generate.cli([str(REPO / "results" / "kvm-2vcpu-paddle2.6.2-cluster-ssh.jsonl")]) == 0
    out = capsys.readouterr()
    assert sorted(os.listdir(tmp_path)) == ["report"] and any(name.endswith(".png") for name in os.listdir("report"))
    assert "](report/" in out.out and "chart(s) (PNG + CSV) in report" in out.err
    assert "/report/" in (REPO / ".gitignore").read_text().splitlines()
    makefile = (REPO / "Makefile").read_text()
    calls = [line for line in makefile.splitlines() if "fleetbench report " in line]
    assert calls and all("--images " in line for line in calls), calls  # every target says where
    assert "fleetbench report results/demo.jsonl --images images --readme README.md" in makefile


# ---- --full: the README gets a digest, another file the whole section ---------------------------

DEMO = REPO / "results" / "epyc-2vcpu-paddle2.6.2-demo-2026-11-29-b.jsonl"  # tables, comm, explain rows


def _marked(text: str) -> str:
    return text.split(generate.BEGIN + "\n", 1)[1].split(generate.END, 1)[0]


@pytest.fixture(scope="module")
def full_report(tmp_path_factory):
    root = tmp_path_factory.mktemp("full")
    (root / "docs").mkdir()
    (root / "README.md").write_text(README)
    (root / "docs" / "demo.md").write_text(README)
    (root / "docs" / "alone.md").write_text(README)
    argv = [str(DEMO), "--images", str(root / "images")]
    assert generate.cli(argv + ["--readme", str(root / "README.md"), "--full", str(root / "docs" / "demo.md")]) == 0
    assert generate.cli(argv + ["--readme", str(root / "docs" / "alone.md")]) == 0
    return root


def test_full_gets_the_section_readme_alone_would_and_the_readme_its_digest(full_report):
    full = _marked((full_report / "docs" / "demo.md").read_text())
    assert full == _marked((full_report / "docs" / "alone.md").read_text())  # --full changes nothing of it
    digest = _marked((full_report / "README.md").read_text())
    tables = [line for line in digest.splitlines() if line.startswith("| Network")]
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", digest)
    explain_rows = [line for line in digest.split("### Why not better", 1)[1].splitlines()
                    if line.startswith("| ") and not line.startswith("| Cell")]
    assert len(tables) == 1 and len(images) == 1 and len(explain_rows) == 1, digest
    assert (full_report / images[0]).is_file() and images[0] == "images/resnet50-tiny-mgwfbp.png"
    assert "[docs/demo.md](docs/demo.md)" in digest
    # every other line is the full section's, in its order (the image re-pointed from docs/)
    kept = [line.replace("](images/", "](../images/") for line in digest.splitlines()
            if line and "docs/demo.md" not in line]
    lines = iter(full.splitlines())
    assert all(line in lines for line in kept), "the digest is not a subsequence of the full section"
    assert full.count("| Network") > 1 and full.count("![") > 1  # the rest is in the full file


def test_full_rerun_is_idempotent_and_full_alone_is_refused(full_report, capsys):
    texts = {p: p.read_bytes() for p in (full_report / "README.md", full_report / "docs" / "demo.md")}
    assert generate.cli([str(DEMO), "--images", str(full_report / "images"), "--readme",
                         str(full_report / "README.md"), "--full", str(full_report / "docs" / "demo.md")]) == 0
    assert {p: p.read_bytes() for p in texts} == texts
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        generate.cli([str(DEMO), "--images", str(full_report / "images"), "--full", str(full_report / "docs" / "demo.md")])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and err[-1].endswith("--full: the README whose section links to it is missing "
                                                       "(expected --readme FILE too)")


def test_the_committed_readme_and_demo_doc_are_what_the_report_writes(tmp_path):
    # the files as `make demo` leaves them, regenerated here from the committed demo records
    (tmp_path / "docs").mkdir()
    for name in ("README.md", "docs/demo.md"):
        (tmp_path / name).write_text((REPO / name).read_text())
    source = _marked((REPO / "README.md").read_text()).split("records in `", 1)[1].split("`", 1)[0]
    assert generate.cli([str(REPO / source), "--images", str(tmp_path / "images"), "--readme",
                         str(tmp_path / "README.md"), "--full", str(tmp_path / "docs" / "demo.md")]) == 0
    for name in ("README.md", "docs/demo.md"):
        assert (tmp_path / name).read_text().replace(str(REPO) + "/", "") == (REPO / name).read_text(), name
