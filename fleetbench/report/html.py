"""`fleetbench report ... --html DIR`: the report as one self-contained static page, DIR/index.html.

The page is the report's own markdown (tables, charts, run lists with outliers and disturbed runs
marked, why not better, cluster health; given two sides, the comparison and the history), turned
into HTML by Python-Markdown, with every chart inlined as a data: URI, the style in the page, and
no script: it opens from a file, with no server and no network at view time. The charts' PNG and
CSV files stay in DIR/images beside it, so every figure on the page is traceable to its numbers.
tests/unit/test_html_report.py loads it in headless Chromium and checks every section and image.
"""
from __future__ import annotations

import base64
import html
import os
import re
from typing import Callable

from fleetbench import cmdline
from fleetbench.report.output import write_if_changed

CSS = """
body { font-family: "DejaVu Sans", Verdana, sans-serif; font-size: 14px; margin: 0; color: #1a1a1a; }
nav { position: fixed; top: 0; left: 0; bottom: 0; width: 15rem; overflow-y: auto; padding: 1rem;
      background: #f4f6f8; border-right: 1px solid #d8dde3; font-size: 12px; }
nav a { color: #0b5394; text-decoration: none; display: block; margin: 0.15rem 0; }
nav .h3 { padding-left: 0.8rem; }
main { margin-left: 17.5rem; padding: 1rem 2rem 3rem 1rem; max-width: 80rem; }
section { border-top: 1px solid #d8dde3; margin-top: 1.5rem; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 13px; }
th, td { border: 1px solid #c8cdd3; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #eef1f4; }
tr:nth-child(even) td { background: #fafbfc; }
img { max-width: 100%; height: auto; border: 1px solid #e3e6ea; margin: 0.4rem 0; }
code { background: #f0f2f4; padding: 0 0.2rem; }
li { margin: 0.2rem 0; }
.mark-disturbed { color: #b45f06; font-weight: bold; }
.mark-outlier { color: #990000; }
.verdict-slower { color: #990000; font-weight: bold; }
.verdict-faster { color: #1b7f3b; font-weight: bold; }
"""

# Words a reader scans for, made visible: the run list's marks and compare's verdicts.
MARKS = ((r"\(disturbed: [^)]*\)", "mark-disturbed"), (r"\(outlier, (?:excluded|kept)\)", "mark-outlier"),
         (r"(?<=>)SLOWER(?=<)", "verdict-slower"), (r"(?<=>)faster(?=<)", "verdict-faster"))


class PageError(cmdline.UserError):
    """A page that could not be made whole (a chart file missing): one line."""


def to_html(text: str) -> str:
    import markdown
    return markdown.markdown(text, extensions=["tables", "toc", "sane_lists"], output_format="html")


def inline_images(body: str, base: str) -> str:
    """Every <img src="relative.png"> as a data: URI read from `base`; PageError naming a missing file."""
    def inline(match: re.Match) -> str:
        src = html.unescape(match.group(2))
        if src.startswith("data:"):
            return match.group(0)
        path = os.path.join(base, src)
        try:
            with open(path, "rb") as handle:
                data = base64.b64encode(handle.read()).decode("ascii")
        except OSError as exc:
            raise PageError(f"{path}: chart missing from the page ({exc.strerror})") from None
        return f'{match.group(1)}"data:image/png;base64,{data}"'
    return re.sub(r'(<img [^>]*?src=)"([^"]+)"', inline, body)


def sectioned(body: str) -> str:
    """Each <h2>/<h3> and what follows it up to the next heading of its level or above, wrapped in
    <section id="s-ID"> so a reader (and a test) finds every section whole."""
    parts = re.split(r"(?=<h[23] id=\")", body)
    out, open_levels = [], []
    for part in parts:
        heading = re.match(r'<h([23]) id="([^"]+)"', part)
        if heading:
            level = int(heading.group(1))
            while open_levels and open_levels[-1] >= level:
                out.append("</section>")
                open_levels.pop()
            out.append(f'<section id="s-{heading.group(2)}" class="h{level}">')
            open_levels.append(level)
        out.append(part)
    out += ["</section>"] * len(open_levels)
    return "".join(out)


def toc(body: str) -> str:
    entries = re.findall(r'<h([23]) id="([^"]+)">(.*?)</h\1>', body)
    links = [f'<a class="h{level}" href="#{ident}">{re.sub("<[^>]+>", "", title)}</a>' for level, ident, title in entries]
    return "<nav><strong>Contents</strong>" + "".join(links) + "</nav>"


def page(title: str, text: str, base: str) -> str:
    """The whole page for the markdown `text`, its images read relative to `base`."""
    body = inline_images(to_html(text), base)
    for pattern, css in MARKS:
        body = re.sub(pattern, lambda m, css=css: f'<span class="{css}">{m.group(0)}</span>', body)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head>\n<body>"
            f"{toc(body)}<main><h1>fleetbench report</h1>\n{sectioned(body)}</main></body></html>\n")


def traces_section(records: list[dict], link: Callable[[str], str]) -> str:
    """The page's `Traces` section: every run that wrote Chrome traces (`--trace`, the record's
    metrics.trace_files), a link per rank (`link`: a path as the page reaches it); a trace moved
    or deleted since is named, not linked. Empty when no run traced."""
    traced = [r for r in records if (r.get("metrics") or {}).get("trace_files")]
    if not traced:
        return ""
    lines = ["", "## Traces", "", "Chrome traces of the runs that wrote them (`--trace DIR`; docs/guide/traces.md), "
             "one per rank: open one in Perfetto (ui.perfetto.dev, *Open trace file*) or Chromium's "
             "chrome://tracing (*Load*). Time runs from the barrier every rank passes before training.", "",
             "| run | benchmark | method | world size | stored | traces |", "|---|---|---|---|---|---|"]
    for r in traced:
        files = [f"[rank {i}]({link(path)})" if os.path.exists(path) else f"rank {i} (gone: `{path}`)"
                 for i, path in enumerate(r["metrics"]["trace_files"])]
        lines.append(f"| {r['id'][:8]} | {r['benchmark']} {r.get('preset') or ''} | {r['method']} | "
                     f"{r['world_size']} | {r['time'][:19]} | {' · '.join(files)} |")
    return "\n".join(lines) + "\n"


def write(out_dir: str, title: str, text: str) -> str:
    """DIR/index.html of the markdown `text` (its images linked relative to DIR); returns its path."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "index.html")
    write_if_changed(path, page(title, text, out_dir).encode("utf-8"))
    return path
