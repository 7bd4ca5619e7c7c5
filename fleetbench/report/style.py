"""fleetbench's one plot style: every chart of the suite is drawn with these settings and saved
with SAVE, so the same input gives byte-identical PNGs on every machine (Agg backend, a font
shipped with matplotlib, fixed size, margins and DPI, no version or time stamp in the file).
"""
from __future__ import annotations

import io
import math
import re


def __getattr__(name: str):
    """`matplotlib`, `Figure` and `Patch`, imported on first use: matplotlib takes 0.4 s to import,
    which a command that draws nothing (`history --json`, `history --regressions`) need not pay."""
    if name not in ("matplotlib", "Figure", "Patch"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import matplotlib
    matplotlib.use("Agg")  # before anything imports pyplot: no display, deterministic raster output
    from matplotlib.figure import Figure  # after use(); the figure class to draw on
    from matplotlib.patches import Patch
    globals().update(matplotlib=matplotlib, Figure=Figure, Patch=Patch)
    return globals()[name]

STYLE = {
    "font.family": "DejaVu Sans",  # shipped with matplotlib: same glyphs on every machine
    "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "legend.fontsize": 8,
    "xtick.labelsize": 9, "ytick.labelsize": 8,
    "axes.grid": True, "axes.grid.axis": "y", "grid.linestyle": ":", "grid.alpha": 0.6,
    "axes.spines.top": False, "axes.spines.right": False, "axes.axisbelow": True,
    "hatch.linewidth": 0.6, "errorbar.capsize": 2, "svg.hashsalt": "fleetbench",
}
# Okabe-Ito palette: distinguishable with colour-vision deficiencies.
COLORS = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
PS_HATCH = "///"  # parameter-server series are hatched, collective ones are plain
FIGSIZE = (9.0, 4.6)
# Fixed margins (not a layout engine): room for the legend on the right and the caption below,
# and one draw per figure instead of two.
MARGINS = {"left": 0.075, "right": 0.775, "top": 0.86, "bottom": 0.2}
DPI = 100
SAVE = {"dpi": DPI, "format": "png", "metadata": {"Software": None}}  # no version/time stamps


def slug(*parts) -> str:
    """A file name from parts: lowercase letters, digits, dots and underscores joined by '-'."""
    text = "-".join(str(p) for p in parts if p not in (None, ""))
    return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-").lower()


def wrapped_text(fig, x: float, y: float, text: str, fontsize: float, **kwargs) -> None:
    """fig.text(x, y, text) broken into lines at spaces to fit between x and the figure's right
    edge: the lines matplotlib's `wrap=True` makes (the longest run of words whose rendered width
    fits, at least one word), found by bisection over the words. Why not wrap=True: it measures
    every prefix of every line again at each layout of the text, ~0.1 CPU s for a chart's caption,
    a fifth of a chart."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.font_manager import FontProperties

    renderer = FigureCanvasAgg(fig).get_renderer()  # Agg draws the PNG: the same text metrics
    prop = FontProperties(size=fontsize)  # the family and style of the rc in force (STYLE)
    # pixels from x to the right edge, computed as matplotlib does (figure coordinates transformed,
    # then subtracted: 900 * (1 - 0.9) is 89.99999999999997 and a line exactly 90 wide fits); SAVE's
    # dpi is the figure's
    limit = fig.bbox.x1 - fig.transFigure.transform((x, y))[0]

    def fits(words: list[str]) -> bool:  # as matplotlib measures a line: its width rounded up
        return math.ceil(renderer.get_text_width_height_descent(" ".join(words), prop, ismath=False)[0]) <= limit

    lines = []
    for paragraph in text.split("\n"):
        words = paragraph.split(" ")
        while words:
            lo, hi = 1, len(words)  # words[:lo] is taken whatever its width; find the longest that fits
            while lo < hi:
                mid = (lo + hi + 1) // 2
                lo, hi = (mid, hi) if fits(words[:mid]) else (lo, mid - 1)
            lines.append(" ".join(words[:lo]))
            words = words[lo:]
    fig.text(x, y, "\n".join(lines), fontsize=fontsize, **kwargs)


def text_renderer(fig):
    """The renderer Agg draws `fig`'s PNG with: texts measured with it are measured as drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    return FigureCanvasAgg(fig).get_renderer()


def overlapping(fig, texts) -> list[tuple[str, str]]:
    """Pairs of `texts` (matplotlib Text artists of `fig`, empty and hidden ones left out) whose
    extents, as Agg lays them out, share more than a pixel's edge: labels drawn over each other."""
    renderer = text_renderer(fig)
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_visible() and t.get_text().strip()]
    return [(a, b) for i, (a, box_a) in enumerate(boxes) for b, box_b in boxes[i + 1:]
            if min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0) > 1 and min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0) > 1]


def finish(fig, ax, title: str, footnote: str) -> bytes:
    """The PNG of a chart drawn on `ax`: its title, the legend outside on the right (MARGINS leave
    room for it), the footnote under the axes, saved with SAVE."""
    ax.set_title(title, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.text(0.01, 0.005, footnote, fontsize=7, ha="left", va="bottom")
    buffer = io.BytesIO()
    fig.savefig(buffer, **SAVE)
    return buffer.getvalue()
