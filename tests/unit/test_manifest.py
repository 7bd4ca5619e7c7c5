"""results/reference/manifest.yaml, the one list of published tables: every reference table and
every hybrid-parallel table is in it, every entry names a file that exists and a converter that
converts it, and the records cite the page the manifest names."""
import importlib
import json

import pytest

from fleetbench.perfmodel import hybrid_tables, manifest, node, validate
from util import REPO

REFERENCE = REPO / "results" / "reference"


def test_every_reference_table_is_in_the_manifest_and_every_entry_exists():
    assert set(manifest.reference_tables()) == {p.name for p in REFERENCE.glob("*.jsonl")}
    assert set(manifest.hybrid_tables()) == {p.name for p in hybrid_tables.TABLES_DIR.glob("*.yaml")}


@pytest.mark.parametrize("file", sorted(manifest.reference_tables()))
def test_each_entry_names_its_converter_and_the_page_its_records_cite(file):
    table = manifest.reference_tables()[file]
    converter = importlib.import_module(table.converter)
    assert hasattr(converter, "main")
    if table.key is not None:
        assert table.key in converter.SOURCES
    records = [json.loads(line) for line in (REFERENCE / file).read_text().splitlines() if line.strip()]
    assert {r["source"]["name"] for r in records} == {table.name}
    assert {r["source"]["url"].split("#")[0] for r in records} == {table.url}
    assert f"/blob/{table.commit.split()[0]}/" in table.url


def test_the_fitted_lists_are_the_manifests():
    tables = manifest.reference_tables().values()
    assert validate.FITTED_TABLES == {t.name for t in tables if t.role == "fit"}
    assert node.PRIOR_TABLES == {t.name for t in tables if t.node_prior} and node.PRIOR_TABLES <= validate.FITTED_TABLES
    assert {t["file"]: t["role"] for t in hybrid_tables.tables()} == \
        {f: t.role for f, t in manifest.hybrid_tables().items()}


def test_a_role_outside_fit_and_check_is_refused(tmp_path):
    bad = tmp_path / "manifest.yaml"
    bad.write_text("tables:\n  x.jsonl:\n    role: fitted\nhybrid_tables: {}\n")
    with pytest.raises(ValueError, match="x.jsonl: role 'fitted' \\(expected one of fit, check\\)"):
        manifest.load(bad)
