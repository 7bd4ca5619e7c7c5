"""The order of a sweep's runs (pure: counts in, the next cell out; the runner runs it).

In turn order a cell takes all its repeats before the next cell starts. Interleaved (`fleetbench
sweep --interleave`, `interleave: true`) the sweep runs in rounds: round r runs repeat r of every
cell not yet over, in cell order. A machine's speed drifts between runs minutes apart (+-10%
between sets of runs, with nothing else running), and when one cell's runs all
come before another's, that drift reads as a difference between them; interleaved, it falls on
every cell alike (benchstat's and pyperf's advice). The rule works from counts alone, so a
resumed sweep goes on with the round it stopped in, then the next: the next turn is the open
cell with the fewest turns taken, the first in cell order among equals.

A cell's turns are the runs stored for it before the sweep plus the runs (failed ones too) it
made in this sweep: each turn is one repeat number, as in turn order, so a failing cell cannot
take the turn again and again. A cell is over when it is finished (its repeats, or until-stable's
stop), skipped, or has taken its most turns; over cells are passed by.
"""
from __future__ import annotations

from collections.abc import Sequence


def next_turn(turns: Sequence[int], open_: Sequence[bool], interleave: bool) -> int | None:
    """The index of the cell that runs next, None when every cell is over. `turns[i]`: repeats
    cell i has taken (stored before plus made now); `open_[i]`: whether it may take another."""
    candidates = [i for i, o in enumerate(open_) if o]
    if not candidates:
        return None
    if not interleave:
        return candidates[0]
    return min(candidates, key=lambda i: (turns[i], i))


def schedule(done: Sequence[int], limits: Sequence[int], interleave: bool) -> list[tuple[int, int]]:
    """Every (cell index, repeat) turn, in order, of cells with `done` runs stored that each run up
    to `limits[i]` repeats, none stopping early (no failure, no until-stable stop): what
    `--dry-run` shows and what the runner does when nothing stops a cell before its limit."""
    turns, out = list(done), []
    while (i := next_turn(turns, [t < m for t, m in zip(turns, limits)], interleave)) is not None:
        turns[i] += 1
        out.append((i, turns[i]))
    return out


def rounds_text(done: Sequence[int], limits: Sequence[int]) -> str:
    """`interleaved: rounds of one run of each cell not yet over, in cell order; round 3 next`
    for the dry run and the sweep's first lines; "" when no cell has a run left."""
    left = [d for d, m in zip(done, limits) if d < m]
    if not left:
        return ""
    return f"interleaved: rounds of one run of each cell not yet over, in cell order; round {min(left) + 1} next"
