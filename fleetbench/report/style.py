"""fleetbench's one plot style: every chart of the suite is drawn with these settings and saved
with SAVE, so the same input gives byte-identical PNGs on every machine (Agg backend, a font
shipped with matplotlib, fixed size, margins and DPI, no version or time stamp in the file).
"""
from __future__ import annotations

import io
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


def finish(fig, ax, title: str, footnote: str) -> bytes:
    """The PNG of a chart drawn on `ax`: its title, the legend outside on the right (MARGINS leave
    room for it), the footnote under the axes, saved with SAVE."""
    ax.set_title(title, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.text(0.01, 0.005, footnote, fontsize=7, ha="left", va="bottom")
    buffer = io.BytesIO()
    fig.savefig(buffer, **SAVE)
    return buffer.getvalue()
