"""`fleetbench diagnose`: per-node and per-link tests, judged against peers or a baseline.

probe.py runs on a node (the benchmarks); plan.py (pure) orders the tests; rules.py (pure) judges
the figures; cli.py orchestrates them over the nodes, as SuperBench keeps benchmarks apart from the
runner that drives them.
"""
