"""Megatron-Bridge's 26.04.01 performance rows as held-out hybrid tables (sources/megatron_bridge.py): the
committed tables are the converter's output of the page kept beside them, and every DGX-H100/B200 row of
the release is either a cell or listed as not entered."""
from pathlib import Path

import pytest

from fleetbench.perfmodel import hybrid_tables, manifest
from fleetbench.perfmodel.sources import markdown_tables as md
from fleetbench.perfmodel.sources import megatron_bridge as bridge

PAGE = Path(__file__).resolve().parents[2] / "results" / "reference" / "megatron-bridge" / "performance-summary-archive.md"


@pytest.mark.parametrize("key", sorted(bridge.SOURCES))
def test_committed_table_is_the_converters_output(key):
    assert (hybrid_tables.TABLES_DIR / f"{key}.yaml").read_text() == bridge.convert(key, PAGE.read_text())
    assert manifest.hybrid_tables()[f"{key}.yaml"].role == "check"
    listed = hybrid_tables.cells(hybrid_tables.load(hybrid_tables.TABLES_DIR / f"{key}.yaml"))
    assert all(c.predicted is not None or c.note for c in listed)


def test_every_h100_and_b200_row_of_the_release_is_a_cell_or_listed():
    text = PAGE.read_text()
    rows = [r for t in md.tables(bridge.release_section(text)) for r in t.rows if r[0] in bridge.CLUSTERS]
    entered = sum(len(bridge.cells_of(k, text)) for k in bridge.SOURCES)
    assert len(rows) == entered + len(bridge.not_entered(text)) == 13
    llama = bridge.cells_of("mbridge-2604-h100", text)[0]
    assert (llama["published"], llama["tp"], llama["pp"], llama["interleave"], llama["precision"]) == (1664.0, 4, 8, 5, "fp8-cs")
