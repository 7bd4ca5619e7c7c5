"""The pure half of `fleetbench diagnose` (no tests run here, no commands): figures and rules in,
verdicts out, against the peers or against a baseline.

metrics.py (every figure, declared once), rules.py (rules and registered criteria), judge.py
(references and verdicts), blame.py (which node a slow link is charged to), baseline.py (a
baseline's figures over healthy runs), resolution.py (what the tests could see), verdicts.py (one
measurement's report). It imports nothing of the diagnose room outside it: the measurement
(measure.py) and the command line (cli.py) hand it figures and read its verdicts.
"""
