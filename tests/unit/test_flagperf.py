"""FlagPerf's Megatron-Core LLM cases as held-out hybrid tables (sources/flagperf.py): the committed tables are
the converter's output of the READMEs kept beside them, and every performance row is a cell or listed."""
from pathlib import Path

import pytest

from fleetbench.perfmodel import hybrid_tables, manifest
from fleetbench.perfmodel.sources import flagperf

PAGES = Path(__file__).resolve().parents[2] / "results" / "reference" / "flagperf"


@pytest.mark.parametrize("key", sorted(flagperf.SOURCES))
def test_committed_table_is_the_converters_output(key):
    assert (hybrid_tables.TABLES_DIR / f"{key}.yaml").read_text() == flagperf.convert(key, PAGES)
    assert manifest.hybrid_tables()[f"{key}.yaml"].role == "check"
    listed = hybrid_tables.cells(hybrid_tables.load(hybrid_tables.TABLES_DIR / f"{key}.yaml"))
    assert all(c.predicted is not None or c.note for c in listed)


def test_every_row_is_a_cell_or_listed():
    rows = flagperf._readme_rows(PAGES)
    cells = sum(len(flagperf.cells_of(k, PAGES)) for k in flagperf.SOURCES)
    assert len(rows) == cells + len(flagperf.not_entered(PAGES)) == 22 and cells == 20
    big = next(c for c in flagperf.cells_of("flagperf-h100", PAGES) if c["gpus"] == 440)
    assert (big["global_batch"], big["published"], big["tp"]) == (1760, 7047.0, 2)
    assert [c["global_batch"] for c in flagperf.cells_of("flagperf-h800", PAGES)] == [44, 44, 44, 1024]
