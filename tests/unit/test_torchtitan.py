"""torchtitan's benchmark pages as held-out hybrid tables (sources/torchtitan.py): the committed tables are
exactly what the converter makes of the pages kept beside them, every printed row is a cell, and
`plan --validate` lists every cell (priced, or with why not)."""
from pathlib import Path

import pytest
import yaml

from fleetbench.perfmodel import hybrid_tables, manifest
from fleetbench.perfmodel.sources import markdown_tables as md
from fleetbench.perfmodel.sources import torchtitan

PAGES = Path(__file__).resolve().parents[2] / "results" / "reference" / "torchtitan"
ROWS = {"torchtitan-2024-h100": 18, "torchtitan-2025-asynctp": 12, "torchtitan-2025-h200": 2}


@pytest.mark.parametrize("key", sorted(torchtitan.SOURCES))
def test_committed_table_is_the_converters_output(key):
    page = (PAGES / torchtitan.SOURCES[key][0]).read_text()
    assert (hybrid_tables.TABLES_DIR / f"{key}.yaml").read_text() == torchtitan.convert(key, page)


@pytest.mark.parametrize("key", sorted(torchtitan.SOURCES))
def test_every_printed_row_is_a_cell_and_listed(key):
    table = hybrid_tables.load(hybrid_tables.TABLES_DIR / f"{key}.yaml")
    assert len(table["rows"]) == ROWS[key]
    listed = hybrid_tables.cells(table)
    assert len(listed) == ROWS[key] and all(c.predicted is not None or c.note for c in listed)
    assert manifest.hybrid_tables()[f"{key}.yaml"].role == "check"


def test_cells_read_as_printed():
    page = (PAGES / "llama3_h100_202412_torchtitan.md").read_text()
    cells = torchtitan.llama3_h100_2024(md.tables(page))
    cp8 = next(c for c in cells if c["name"].startswith("Table 2") and "CP 8" in c["name"])
    assert (cp8["published"], cp8["seq"], cp8["cp"], cp8["global_batch"], cp8["precision"]) == (548.0, 262144, 8, 1, "fp8")
    interleaved = next(c for c in cells if "Interleaved" in c["name"])
    assert (interleaved["published"], interleaved["interleave"], interleaved["memory_mib"]) == (128.0, 2, round(72.7 * 1024))
    assert [c["precision"] for c in cells[:3]] == [None, None, "fp8"]  # FSDP, + compile, + Float8


def test_default_pipeline_split_is_torchtitans():
    assert torchtitan.stage_layers(126, 8) == "15,16,16,16,16,16,16,15"
    assert sum(int(n) for n in torchtitan.stage_layers(126, 16).split(",")) == 126
    assert torchtitan.stage_layers(32, 4) == "8,8,8,8"


def test_unread_fields_are_refused_not_ignored():
    table = yaml.safe_load((hybrid_tables.TABLES_DIR / "torchtitan-2024-h100.yaml").read_text())
    table.update(file="x.yaml", role="check", rows=table["rows"][:1])
    table["defaults"]["made_up_field"] = 3
    (cell,) = hybrid_tables.cells(table)
    assert cell.predicted is None and "made_up_field 3" in cell.note
