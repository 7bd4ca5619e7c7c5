"""`fleetbench diagnose`: per-node and per-link tests, judged against peers or a baseline.

probe.py runs on a node (the benchmarks) and run.py reaches it (fleetbench.hosts.reach);
measure.py runs a diagnosis's tests and re-measures what looks wrong; the pure part that judges
is its own sub-room, judging/ (figures and rules in, verdicts out; it imports nothing of the part
that runs tests); output.py prints its report and cli.py drives them, as SuperBench keeps
benchmarks apart from the runner that drives them.
"""
