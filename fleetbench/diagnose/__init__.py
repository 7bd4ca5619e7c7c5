"""`fleetbench diagnose`: per-node and per-link tests, judged against peers or a baseline.

probe.py runs on a node (the benchmarks) and run.py reaches it (fleetbench.hosts.reach);
measure.py runs a diagnosis's tests and re-measures what looks wrong; the pure part judges:
metrics.py (every figure, declared once), rules.py (rules and registered criteria), judge.py
(references and verdicts), blame.py (which node a slow link is charged to), baseline.py,
resolution.py (what the tests could see), verdicts.py (one measurement's report); cli.py drives
them, as SuperBench keeps benchmarks apart from the runner that drives them.
"""
