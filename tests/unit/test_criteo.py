"""Criteo format: validator counts on a crafted file, strict mode, deterministic hashing across
processes, generator output, the pipe, and the `fleetbench data` command lines."""
import io
import json
import subprocess
import zlib

import pytest
from util import PYTHON, REPO, env

from datasets import cli as data_cli
from datasets import criteo

DENSE_OK = ["1", "", "-3", "0", "42", "", "7", "100000", "", "5", "", "9", "-1"]
CATS_OK = ["68fd1e64", "", "ABCDEF01", "0000abcd"] + ["deadbeef"] * 22


def line(label="1", dense=None, cats=None, end="\n"):
    return "\t".join([label] + (dense or DENSE_OK) + (cats or CATS_OK)) + end


def with_dense(i, value):
    dense = list(DENSE_OK)
    dense[i] = value
    return dense


def with_cat(i, value):
    cats = list(CATS_OK)
    cats[i] = value
    return cats


# (text, valid?) covering every rule of the format
CASES = [
    (line(), True),
    (line(end="\r\n"), True),                                # CRLF terminator
    (line(label="0", dense=[""] * 13, cats=[""] * 26), True),  # every feature missing
    (line(dense=with_dense(1, "-12")), True),                # negative integer
    (line(cats=with_cat(0, "AbCdEf09")), True),              # upper/mixed-case hex
    ("\t".join(["1"] + DENSE_OK + CATS_OK[:-1]) + "\n", False),        # 39 fields
    ("\t".join(["1"] + DENSE_OK + CATS_OK + [""]) + "\n", False),      # 41 fields
    (line(label="2"), False),
    (line(label=""), False),
    (line(label="1.0"), False),
    (line(dense=with_dense(0, "1.5")), False),               # not an integer
    (line(dense=with_dense(3, "+5")), False),                # sign other than '-'
    (line(dense=with_dense(4, " 5")), False),                # whitespace
    (line(dense=with_dense(5, "-")), False),
    (line(dense=with_dense(12, "1e3")), False),
    (line(cats=with_cat(1, "68fd1e6")), False),              # 7 digits
    (line(cats=with_cat(2, "68fd1e644")), False),            # 9 digits
    (line(cats=with_cat(25, "68fd1e6g")), False),            # not hex
    (line(end="\r\r\n"), False),                             # stray \r ends up in C26
    ("\n", False),                                           # blank line
    (line(end="\r") + line(), False),                        # lone \r is not a terminator: one line
    (line(end=""), True),                                    # last line without terminator
]


@pytest.fixture
def crafted(tmp_path):
    path = tmp_path / "crafted.txt"
    path.write_bytes("".join(text for text, _ in CASES).encode())
    return path


def test_each_case_alone():
    for text, valid in CASES:
        assert (criteo.check_line(text.encode()) is None) == valid, text


def test_validator_counts_are_exact(crafted):
    report = criteo.validate([crafted])
    invalid_lines = [n for n, (_, valid) in enumerate(CASES, 1) if not valid]
    assert report["files"] == 1
    assert report["lines"] == len(CASES)
    assert report["valid"] == len(CASES) - len(invalid_lines)
    assert report["invalid"] == len(invalid_lines)
    # the first 10 errors, in order, each naming file and line
    assert [e["line"] for e in report["errors"]] == invalid_lines[:10]
    assert all(e["file"] == str(crafted) for e in report["errors"])
    assert report["errors"][0]["reason"] == "expected 40 tab-separated fields, got 39"
    assert report["errors"][2]["reason"] == "label (field 1) must be 0 or 1, got '2'"


def test_strict_stops_at_first_with_file_and_line(crafted):
    first_bad = next(n for n, (_, valid) in enumerate(CASES, 1) if not valid)
    assert criteo.first_error([crafted]) == f"{crafted}:{first_bad}: expected 40 tab-separated fields, got 39"
    report = criteo.validate([crafted], strict=True)
    assert report["lines"] == first_bad and report["invalid"] == 1


def test_validate_cli_json_and_exit_codes(crafted, tmp_path, capsys):
    assert data_cli.cli(["validate", "criteo", str(crafted), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"files", "lines", "valid", "invalid", "errors"}
    assert report["lines"] == len(CASES)
    assert len(report["errors"]) == 10
    assert set(report["errors"][0]) == {"file", "line", "reason"}
    good = tmp_path / "good.txt"
    good.write_text(line() * 3)
    assert data_cli.cli(["validate", "criteo", str(good), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] == 3
    with pytest.raises(SystemExit) as exit_:  # refused by its parser
        data_cli.cli(["validate", "criteo", str(tmp_path / "missing")])
    assert exit_.value.code == 2 and "no such file" in capsys.readouterr().err


HASH_SNIPPET = ("from datasets import criteo; "
                "print(criteo.hash_category(3, b'68fd1e64', 1000001), criteo.hash_category(26, b'', 1000001))")


def test_hash_is_stable_across_processes_with_different_hash_seeds():
    outputs = set()
    for seed in ("0", "1", "12345"):
        out = subprocess.run([PYTHON, "-c", HASH_SNIPPET], cwd=REPO, env=env(PYTHONHASHSEED=seed),
                             capture_output=True, text=True, check=True).stdout
        outputs.add(out)
    # ...and Python's own str hash really does differ between those processes
    salted = {subprocess.run([PYTHON, "-c", "print(hash('C3:68fd1e64'))"], env=env(PYTHONHASHSEED=seed),
                             capture_output=True, text=True, check=True).stdout for seed in ("1", "2")}
    assert len(outputs) == 1 and len(salted) == 2
    a, b = map(int, outputs.pop().split())
    assert 1000001 > a >= 1 and 1000001 > b >= 1
    # case of the hex digits does not change the feature
    assert criteo.hash_category(3, b"ABCDEF01", 100) == criteo.hash_category(3, b"abcdef01", 100)


def documented_id(slot: int, value: str, buckets: int) -> int:
    """docs/guide/ps.md: 1 + CRC-32("C<slot>:<lower-case hex>") mod (buckets - 1), computed here from the
    whole string (the code continues a per-slot CRC instead)."""
    return 1 + zlib.crc32(f"C{slot}:{value.lower()}".encode("ascii")) % (buckets - 1)


def test_hash_is_the_documented_crc32_formula():
    assert zlib.crc32(b"123456789") == 0xCBF43926  # zlib's CRC-32 is the standard one (its check value)
    for slot, value, buckets in [(1, "68fd1e64", 1000001), (3, "ABCDEF01", 100), (26, "", 1000001),
                                 (14, "0000abcd", 2), (7, "deadbeef", 1009), (26, "FFFFFFFF", 65537)]:
        assert criteo.hash_category(slot, value.encode(), buckets) == documented_id(slot, value, buckets), \
            (slot, value, buckets)
    raw = line(end="").encode()  # and the ids a training line gets are the same formula, slot by slot
    assert criteo.features(raw, 1009)[2] == [documented_id(i + 1, v, 1009) for i, v in enumerate(CATS_OK)]


def test_generator_writes_exact_format_with_skew_missing_and_labels(tmp_path):
    paths = criteo.generate(tmp_path / "d", rows=3001, files=3, seed=7)
    assert [p.name for p in paths] == ["part-00000", "part-00001", "part-00002"]
    report = criteo.validate(paths)
    assert report == {"files": 3, "lines": 3001, "valid": 3001, "invalid": 0, "errors": []}
    rows = [l.rstrip("\n").split("\t") for p in paths for l in p.read_text().splitlines(True)]
    labels = [int(r[0]) for r in rows]
    assert 0.05 < sum(labels) / len(labels) < 0.5
    assert any(r[12] == "" for r in rows) and any(r[14 + 19] == "" for r in rows)  # missing values
    c1 = [r[14] for r in rows]
    top = max(set(c1), key=c1.count)
    assert c1.count(top) > 0.1 * len(c1)  # Zipf head: one value of 1460 takes > 10 %
    # deterministic: same seed, same bytes
    again = criteo.generate(tmp_path / "e", rows=3001, files=3, seed=7)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths]


def test_pipe_skips_invalid_lines_and_counts(tmp_path, crafted):
    out = io.StringIO()
    stats = tmp_path / "stats.jsonl"
    counts = criteo.pipe(io.BytesIO(crafted.read_bytes()), out, buckets=1000, stats_path=str(stats))
    report = criteo.validate([crafted])
    assert counts == {"valid": report["valid"], "invalid": report["invalid"]}
    lines = out.getvalue().splitlines()
    assert len(lines) == report["valid"]
    tokens = lines[0].split()
    # MultiSlot: dense slot of 13 floats, 26 one-id slots, the label slot
    assert tokens[0] == "13" and len(tokens) == 1 + 13 + 26 * 2 + 2
    assert tokens[14::2][:26] == ["1"] * 26 and tokens[-2:] == ["1", "1"]
    assert json.loads(stats.read_text()) == counts


def test_gen_cli_and_registry(tmp_path, capsys):
    assert data_cli.cli(["gen", "criteo", "--out", str(tmp_path / "g"), "--rows", "10", "--files", "2"]) == 0
    assert criteo.validate(criteo.list_files(tmp_path / "g"))["valid"] == 10
    assert "criteo" in data_cli.generators()
    assert data_cli.cli(["gen", "nosuchset"]) == 2
    assert "unknown data set" in capsys.readouterr().err


@pytest.mark.job
def test_fleetbench_data_command_end_to_end(tmp_path):
    out = tmp_path / "c"
    gen = subprocess.run([PYTHON, "-m", "fleetbench", "data", "gen", "criteo", "--out", str(out), "--rows", "50",
                          "--files", "2"], cwd=REPO, env=env(), capture_output=True, text=True)
    assert gen.returncode == 0, gen.stderr
    check = subprocess.run([PYTHON, "-m", "fleetbench", "data", "validate", "criteo", str(out), "--json"],
                           cwd=REPO, env=env(), capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["valid"] == 50


def test_pipe_encoding_is_the_features(tmp_path):
    encode = criteo.Encoder(buckets=1009)
    for raw in criteo.generate(tmp_path / "d", rows=300, files=1, seed=2)[0].read_bytes().splitlines():
        label, dense, ids = criteo.features(raw, 1009)
        tokens = encode(raw).split()
        assert tokens[0] == "13" and [float(t) for t in tokens[1:14]] == pytest.approx(dense, rel=1e-5)
        assert [int(t) for t in tokens[15:15 + 2 * 26:2]] == ids and tokens[14:14 + 2 * 26:2] == ["1"] * 26
        assert tokens[-2:] == ["1", str(label)]
        assert ids[2] == criteo.hash_category(3, raw.split(b"\t")[16], 1009)
