"""Megatron-MoE-ModelZoo's Qwen3 tables as held-out hybrid tables (sources/megatron_moe_modelzoo.py): the
committed tables are the converter's output of the page kept beside them, every printed figure is a cell,
and the FLOP formula that turns a printed TFLOP/s into tokens agrees with the page's own step times."""
from pathlib import Path

import pytest

from fleetbench.perfmodel import hybrid_tables, manifest
from fleetbench.perfmodel.sources import megatron_moe_modelzoo as zoo

PAGE = Path(__file__).resolve().parents[2] / "results" / "reference" / "megatron-moe-modelzoo" / "qwen3-readme.md"
CELLS = {"moe-zoo-qwen3-h100": 14, "moe-zoo-qwen3-gb200": 3, "moe-zoo-qwen3-gb300": 1}


@pytest.mark.parametrize("key", sorted(zoo.SOURCES))
def test_committed_table_is_the_converters_output_and_every_cell_is_listed(key):
    assert (hybrid_tables.TABLES_DIR / f"{key}.yaml").read_text() == zoo.convert(key, PAGE.read_text())
    table = hybrid_tables.load(hybrid_tables.TABLES_DIR / f"{key}.yaml")
    listed = hybrid_tables.cells(table)
    assert len(listed) == CELLS[key] and all(c.predicted is not None or c.note for c in listed)
    assert manifest.hybrid_tables()[f"{key}.yaml"].role == "check"


def test_the_flop_formula_reproduces_the_printed_tflops_from_the_step_times():
    # the H100 table prints both: step time (-> tokens) and TFLOP/s a GPU (Megatron's formula)
    for cell in zoo.cells_of("moe-zoo-qwen3-h100", PAGE.read_text())[:5]:  # the 235B rows
        printed = float(cell["name"].rsplit(", ", 1)[1].split()[0])
        derived = cell["published"] * zoo.mcore_flops_per_token(zoo.MODELS["235B"], cell["seq"]) / 1e12
        assert abs(derived - printed) / printed < 0.01, cell["name"]


def test_long_context_row_gives_both_figures_and_the_even_split_of_layers_plus_ends():
    cells = zoo.cells_of("moe-zoo-qwen3-h100", PAGE.read_text())
    longest = [c for c in cells if c["seq"] == 131072]
    assert [c["balance"] for c in longest] == ["forced", "dropless"] and longest[0]["cp"] == 8
    sizes = [int(n) for n in zoo.stage_layers(94, 8, 4, True).split(",")]
    assert len(sizes) == 32 and sum(sizes) == 94 and sizes[0] == sizes[-1] == 2
    assert zoo.stage_layers(48, 4, 3, False) is None
