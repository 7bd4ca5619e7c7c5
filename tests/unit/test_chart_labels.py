"""No two labels of a report chart are drawn over each other: every bar chart `fleetbench report`
draws from the committed results (results/*.jsonl), laid out as Agg draws it, each text's extent
measured (style.overlapping)."""
from pathlib import Path

import pytest

from fleetbench.store import results
from fleetbench.measure.repeats import stability
from fleetbench.report import charts, tables
from fleetbench.report.style import STYLE, matplotlib, overlapping, text_renderer

REPO = Path(__file__).resolve().parents[2]
COMMITTED = sorted((REPO / "results").glob("*.jsonl"))


def texts(fig) -> list:
    """Every text drawn: titles and bar labels, tick labels, axis labels, the legend's, the caption."""
    from matplotlib.text import Text

    ax, = fig.axes
    legend = ax.get_legend()
    return [*(c for c in ax.get_children() if isinstance(c, Text)), *ax.get_xticklabels(), *ax.get_yticklabels(),
            ax.xaxis.label, ax.yaxis.label, *(legend.get_texts() if legend else ()), *fig.texts]


def committed_charts() -> list:
    found = []
    for path in COMMITTED:
        records = [r for r in results.load(str(path)) if r["mode"] not in ("comm", "diagnose")]
        for table in tables.plan(records, stability.CV_THRESHOLD) if records else ():
            for chart in charts.plan(table):
                found.append(pytest.param(chart, id=f"{path.stem}:{chart['name']}"))
    return found


@pytest.mark.parametrize("chart", committed_charts())
def test_no_two_labels_of_a_chart_overlap(chart):
    with matplotlib.rc_context(STYLE):
        fig = charts.figure(chart)
        fig.draw_without_rendering()  # tick labels are placed when the figure is drawn
        drawn = texts(fig)
        assert overlapping(fig, drawn) == []
        # nor cut off by the figure's edge, nor a bar's label outside the axes (over the title)
        renderer = text_renderer(fig)
        outside = [t.get_text() for t in drawn if t.get_text().strip() and not _within(t.get_window_extent(renderer), fig.bbox)]
        assert outside == []
        ax, = fig.axes
        above = [t.get_text() for t in ax.texts if not _within(t.get_window_extent(renderer), ax.bbox)]
        assert above == []


def _within(box, frame) -> bool:
    return box.x0 >= frame.x0 - 0.5 and box.x1 <= frame.x1 + 0.5 and box.y0 >= frame.y0 - 0.5 and box.y1 <= frame.y1 + 0.5


def test_the_check_sees_labels_drawn_over_each_other():
    """The measure itself: two annotations at one point overlap, side by side they do not."""
    from matplotlib.figure import Figure

    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(4, 3), dpi=100)
        ax = fig.add_subplot()
        a, b = (ax.annotate(text, (0.5, 0.5), ha="center") for text in ("23.69 ± 0.17%", "47.6 ± 0.4%"))
        c = ax.annotate("far", (0.05, 0.05))
        assert overlapping(fig, [a, b, c]) == [("23.69 ± 0.17%", "47.6 ± 0.4%")]
