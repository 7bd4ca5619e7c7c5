"""Core sharing: how a process's step time changes when the processes on its host, and the
threads each gets, change; from a measured thread-scaling curve, not an assumed linear one.

A process with t OpenMP threads on a host of c cores shared by p processes takes

    time(t, p) = T(t) x max(1, p·t / c)

T(t): the step of the work run alone at t threads (the thread-scaling curve); the second factor is
time-slicing when the host's threads outnumber its cores. A prediction moves a measured cell
(t_s threads, p_s processes) to a target (t_t = c // p_t threads, what fleetbench and the sweep
give a process, and p_t processes) by time(t_t, p_t) / time(t_s, p_s). T(t_t) / T(t_s) is, first:

1. measured on this work: its 1-device runs at both thread counts (a short 1-process run at each);
2. borrowed from other works on the same host (same Paddle build, CPU model, cores and memory):
   their 1-device runs at both counts, or a method=none control whose p processes of t_t threads
   fit the cores (p·t_t <= c: each process has its threads' cores, so its step is T(t_t) with the
   contention of its neighbours) against their 1-device run at t_s; the mean over works, each
   named in the note (measured here: ResNet50 and BERT-Large run 1.24-1.30x slower on 1 thread
   beside a second process than alone on 2, not 2x);
3. else linear thread scaling, T(t) proportional to 1/t, which overstates the loss (an upper
   bound of the step: a work cannot gain more than linearly from threads), and the note says so.

A control of the target's own shape needs none of this (predict.base_for takes it as it is).
GPU ranks own their device: no scaling.
"""
from __future__ import annotations

import statistics

MEASURED, BORROWED, ASSUMED = "measured", "borrowed", "assumed linear"


def procs_per_host(shape, emulated: bool) -> int:
    """Processes sharing one host's cores: every rank when the nodes are emulated on one machine."""
    return shape.world_size if emulated and shape.nodes > 1 else shape.devices_per_node


def _slicing(threads: int, procs: int, cores: int) -> float:
    return max(1.0, procs * threads / cores)


def _host(cell) -> tuple:
    # cell.work is experiment.comparable(): (source, benchmark, preset, unit, paddle, device, host, config)
    source, _, _, _, paddle, device, host, _ = cell.work
    return source, paddle, device, host


def _lone(cells, work, threads: int):
    """The 1-device training cell of `work` at `threads` (most runs first), or None."""
    found = [c for c in cells if c.work == work and c.shape.world_size == 1 and not c.control
             and c.threads == threads]
    return max(found, key=lambda c: c.runs, default=None)


def _controls_at(cells, work, threads: int) -> list:
    """Controls of `work` whose processes run at `threads` each with a core per thread."""
    return [c for c in cells if c.work == work and c.control and c.threads == threads and c.cores
            and procs_per_host(c.shape, c.emulated) * threads <= c.cores]


def _time_at(cells, work, threads: int) -> tuple[float | None, str]:
    """T(threads) of one work: its 1-device run at that count, else its controls' mean step."""
    lone = _lone(cells, work, threads)
    if lone is not None:
        return lone.step_ms, f"1-process run at {threads}"
    controls = _controls_at(cells, work, threads)
    if controls:
        shapes = " ".join(sorted(str(c.shape) for c in controls))
        return statistics.fmean(c.step_ms for c in controls), f"control {shapes} at {threads}"
    return None, ""


def work_ratio(cells, work, t_from: int, t_to: int) -> tuple[float | None, str]:
    """T(t_to) / T(t_from) of one work from its own records, and the cells it came from."""
    start, start_from = _time_at(cells, work, t_from)
    end, end_from = _time_at(cells, work, t_to)
    if start is None or end is None:
        return None, ""
    return end / start, f"{end_from} vs {start_from}"


def _label(work) -> str:
    return " ".join(str(p) for p in work[1:3] if p)


def thread_ratio(ref, t_from: int, t_to: int, cells) -> tuple[float, str, str]:
    """(T(t_to) / T(t_from), where from, kind) for ref's work (module docstring, 1-3)."""
    if t_from == t_to:
        return 1.0, "", MEASURED
    own, source = work_ratio(cells, ref.work, t_from, t_to)
    if own is not None:
        return own, f"thread scaling measured on this work ({source}): x{own:.2f}", MEASURED
    others = {c.work for c in cells if c.work != ref.work and _host(c) == _host(ref)}
    found = {}
    for work in sorted(others, key=_label):
        ratio, source = work_ratio(cells, work, t_from, t_to)
        if ratio is not None:
            found[f"{_label(work)} x{ratio:.2f} ({source})"] = ratio
    if found:
        mean = statistics.fmean(found.values())
        return mean, (f"thread scaling borrowed from other works on this host (this work has no run "
                      f"at {t_to} thread(s) and no control): {', '.join(found)}; mean x{mean:.2f}"), BORROWED
    linear = t_from / t_to
    return linear, (f"thread scaling assumed linear (x{linear:.2f}): no run of this or another work "
                    f"on this host at {t_to} thread(s); an upper bound of the slowdown"), ASSUMED


def core_sharing(source, shape, emulated: bool, cells=()) -> tuple[float, str, str]:
    """(factor, note, kind) from `source`'s step to the step of a process of `shape`."""
    if source.gpu or not source.cores or not source.threads:
        return 1.0, "", MEASURED
    cores = source.cores
    p_from, p_to = procs_per_host(source.shape, source.emulated), procs_per_host(shape, emulated)
    t_from, t_to = source.threads, max(1, cores // p_to)
    ratio, how, kind = thread_ratio(source, t_from, t_to, cells)
    factor = ratio * _slicing(t_to, p_to, cores) / _slicing(t_from, p_from, cores)
    if factor == 1.0 and not how:
        return 1.0, "", kind
    note = (f"x{factor:.2f} core sharing ({p_from} -> {p_to} processes per host of {cores} cores, "
            f"{t_from} -> {t_to} threads{'; ' + how if how else ''})")
    return factor, note, kind
