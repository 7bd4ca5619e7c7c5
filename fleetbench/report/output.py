"""Writing a report's files: every chart PNG beside the CSV of exactly the numbers it draws, each
written atomically and only when its bytes change (re-runs leave files and mtimes alone).

Every section of `fleetbench report` (tables, comm, AllReduce vs PS, convergence, explain) writes
through here, so none needs the report's command line (`report.plot`) and nothing imports back.
"""
from __future__ import annotations

import os
from typing import Callable

from fleetbench.report import charts


def write_if_changed(path: str, data: bytes) -> bool:
    """Atomic replace, and only when the bytes differ; True when the file was written."""
    try:
        with open(path, "rb") as handle:
            if handle.read() == data:
                return False
    except FileNotFoundError:
        pass
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
    return True


def write_csv(path: str, rows: list[dict]) -> None:
    """`rows` as CSV (floats in full precision), written only when the bytes change."""
    write_if_changed(path, charts.csv_bytes(rows))


def save_chart(images_dir: str, name: str, rows: list[dict], png_bytes: bytes) -> str:
    """images_dir/NAME.png beside NAME.csv, the numbers it draws; returns the PNG's path."""
    os.makedirs(images_dir, exist_ok=True)
    png = os.path.join(images_dir, name + ".png")
    write_csv(png[:-4] + ".csv", rows)
    write_if_changed(png, png_bytes)
    return png


def chart_sections(items: list[dict], heading: Callable[[dict], str], draw_with: tuple, images_dir: str,
                   link: Callable[[str], str]) -> tuple[str, list[str]]:
    """(markdown, files written) of a report section with one chart per item: its PNG and CSV
    (save_chart), then `### heading(item)`, its table and the image. `draw_with` is the section's
    (chart_rows, draw, table_markdown); `link(png_path)` the path the markdown uses."""
    chart_rows, draw, table_markdown = draw_with
    out, written = [], []
    for item in items:
        png = save_chart(images_dir, item["name"], chart_rows(item), draw(item))
        written += [png, png[:-4] + ".csv"]
        out += [f"### {heading(item)}", "", table_markdown(item), "", f"![{item['name']}]({link(png)})", ""]
    return "\n".join(out), written
