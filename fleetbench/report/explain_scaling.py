"""Scaling curves of `fleetbench explain --images`: throughput against devices, one chart per
work and method, one colour per network. Predicted throughput (--predict nodes=2,4,8,...,
--validate) is a line, measured cells are points of the same colour, ideal scaling (the 1-device
run's throughput times the devices) a dashed black line. The CSV beside the PNG holds every
drawn number, with the throughput error where a measured cell and a prediction meet."""
from __future__ import annotations


LINES = ("-", "-.", ":", (0, (5, 1)))


def _key(row: dict) -> tuple:
    """A chart's work and method: benchmark, preset, method, and a published table's precision,
    batch and framework's first word (cells of one model in other precisions are other works)."""
    framework = str(row.get("framework") or "").split(" ")[0] or None
    return row["benchmark"], row.get("preset"), row["method"], row.get("precision"), row.get("batch"), framework


def _slug_parts(key: tuple) -> tuple:
    """File-name parts: a batch only where a framework or precision names the work (older tables'
    charts keep their names)."""
    benchmark, preset, method, precision, batch, framework = key
    return (benchmark, preset, method, precision, framework, batch if (precision or framework) else None)


def _title(key: tuple) -> str:
    benchmark, preset, method, precision, batch, framework = key
    extra = ", ".join(str(p) for p in (framework, precision, f"batch {batch}" if batch else None) if p)
    return f"{benchmark}{f' [{preset}]' if preset else ''} {method}" + (f" ({extra})" if extra else "")


def _single_throughput(cells: list[dict]) -> float | None:
    """Per-device throughput of the 1-device run: a cell's throughput / (efficiency x devices)."""
    for c in cells:
        if c.get("efficiency"):
            return c["throughput"] / (c["efficiency"] * c["world_size"])
    return None


def chart_rows(cells: list[dict], predicted: list[dict]) -> list[dict]:
    """One row per (network, devices): predicted and measured throughput, ideal, error."""
    table: dict = {}
    for c in cells:
        table.setdefault((c["network"] or "local", c["world_size"]), {})["measured"] = c["throughput"]
    for p in predicted:
        if p.get("predicted_throughput") is not None:
            table.setdefault((p["network"] or "local", p["world_size"]), {}).setdefault(
                "predicted", p["predicted_throughput"])
    single = _single_throughput(cells)
    rows = []
    for (network, devices), values in sorted(table.items()):
        measured, pred = values.get("measured"), values.get("predicted")
        rows.append({"network": network, "devices": devices, "predicted_throughput": pred,
                     "measured_throughput": measured,
                     "ideal_throughput": single * devices if single else None,
                     "throughput_error": pred / measured - 1 if pred and measured else None})
    return rows


def _axes(style):
    """A figure and its axes in the one plot style (call inside matplotlib.rc_context(style.STYLE))."""
    fig = style.Figure(figsize=style.FIGSIZE, dpi=style.DPI)
    fig.subplots_adjust(**style.MARGINS)
    return fig, fig.add_subplot()


def _by_network(rows: list[dict]):
    """(index, network, its rows) in the order networks first appear: one colour and style each."""
    for i, network in enumerate(dict.fromkeys(r["network"] for r in rows)):
        yield i, network, [r for r in rows if r["network"] == network]


def _devices_axis(ax, rows: list[dict]) -> None:
    devices = sorted({r["devices"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(devices, [str(d) for d in devices])
    ax.set_xlabel("devices (GPUs or processes)")


def draw(rows: list[dict], title: str, unit: str) -> bytes:
    from fleetbench.report import style  # the one plot style (and matplotlib's Agg backend)

    import matplotlib

    with matplotlib.rc_context(style.STYLE):
        fig, ax = _axes(style)
        for i, network, mine in _by_network(rows):
            line = [(r["devices"], r["predicted_throughput"]) for r in mine if r["predicted_throughput"]]
            points = [(r["devices"], r["measured_throughput"]) for r in mine if r["measured_throughput"]]
            color = style.COLORS[i % len(style.COLORS)]
            if line:  # networks that predict alike (both bound inside the node) stay visible by style
                ax.plot(*zip(*line), color=color, marker="x", linestyle=LINES[i % len(LINES)],
                        label=f"{network} predicted")
            if points:
                ax.scatter(*zip(*points), color=color, marker="o", facecolors="none", s=40,
                           label=f"{network} measured", zorder=3)
        ideal = sorted({(r["devices"], r["ideal_throughput"]) for r in rows if r["ideal_throughput"]})
        if ideal:
            ax.plot(*zip(*ideal), color="black", linestyle="--", linewidth=0.8, label="ideal (1 device x N)")
        _devices_axis(ax, rows)
        ax.set_yscale("log")  # works of 50 and of 5000 units/s both readable; ideal is a straight line
        ax.set_ylabel(f"throughput ({unit})")
        return style.finish(fig, ax, title, "lines: predicted by fleetbench explain (docs/guide/explain.md); circles: "
                            "measured or published; dashed: ideal")


def write_charts(cells: list[dict], predicted: list[dict], images_dir: str) -> list[str]:
    """images_dir/explain-scaling-<benchmark>-<preset>-<method>.png (+ CSV) for every work and
    method predicted at two sizes or more; returns the PNG paths."""
    from fleetbench.report import output, style

    written = []
    drawn = [p for p in predicted if p.get("predicted_throughput")]  # a row not predicted draws nothing
    for key in dict.fromkeys(_key(p) for p in drawn):
        mine = [p for p in drawn if _key(p) == key]
        if len({p["world_size"] for p in mine}) < 2:
            continue
        measured = [c for c in cells if _key(c) == key]
        rows = chart_rows(measured, mine)
        unit = measured[0]["unit"] if measured else "units/s"
        title = f"{_title(key)}: throughput against devices"
        written.append(output.save_chart(images_dir, style.slug("explain-scaling", *_slug_parts(key)), rows,
                                         draw(rows, title, unit)))
    return written


def efficiency_rows(predicted: list[dict], networks: tuple) -> list[dict]:
    """One row per (network, devices): the predicted efficiency and its range; `networks` in the
    order they are drawn (the model's: by rate, perfmodel/whatif.network_order)."""
    rows = []
    for p in predicted:
        if p.get("predicted_efficiency") is None:
            continue
        low, high = p.get("predicted_step_range") or (p["predicted_step_ms"],) * 2
        scale = p["predicted_efficiency"] * p["predicted_step_ms"]
        rows.append({"network": p["network"] or "local", "devices": p["world_size"],
                     "efficiency": p["predicted_efficiency"], "efficiency_low": scale / high,
                     "efficiency_high": scale / low})
    return sorted(rows, key=lambda r: (networks.index(r["network"]), r["devices"]))


def draw_efficiency(rows: list[dict], title: str) -> bytes:
    from fleetbench.report import style  # the one plot style (and matplotlib's Agg backend)

    import matplotlib

    with matplotlib.rc_context(style.STYLE):
        fig, ax = _axes(style)
        for i, network, mine in _by_network(rows):
            xs = [r["devices"] for r in mine]
            color = style.COLORS[i % len(style.COLORS)]
            ax.plot(xs, [r["efficiency"] for r in mine], color=color, marker="x", linestyle=LINES[i % len(LINES)],
                    label=f"{network}")
            ax.fill_between(xs, [r["efficiency_low"] for r in mine], [r["efficiency_high"] for r in mine],
                            color=color, alpha=0.15, linewidth=0)
        _devices_axis(ax, rows)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel("predicted scaling efficiency")
        return style.finish(fig, ax, title, "lines: predicted by fleetbench explain --predict (docs/guide/explain.md); "
                            "bands: the prediction's range")


def write_efficiency(predicted: list[dict], networks: tuple, images_dir: str) -> list[str]:
    """images_dir/explain-efficiency-<benchmark>-<preset>-<method>.png (+ CSV): predicted efficiency
    against devices, a line per network (in the order of `networks`), for every work and method
    predicted at two sizes or more."""
    from fleetbench.report import output, style

    written = []
    for key in dict.fromkeys(_key(p) for p in predicted if p.get("predicted_efficiency") is not None):
        rows = efficiency_rows([p for p in predicted if _key(p) == key and p.get("kind") != "validation"], networks)
        if len({r["devices"] for r in rows}) < 2:
            continue
        title = f"{_title(key)}: predicted efficiency against devices"
        written.append(output.save_chart(images_dir, style.slug("explain-efficiency", *_slug_parts(key)), rows,
                                         draw_efficiency(rows, title)))
    return written
