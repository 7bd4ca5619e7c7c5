"""Did it get slower: the command lines that compare runs, on the history room's statistics
(fleetbench/history: the tests, change points, the results database).

comparison.py (`fleetbench compare`: two sides of runs, cells matched and tested; also how every
command here reads its sides), history.py (`fleetbench history`: each cell through time, its change
points, a chart each) and gate.py (`fleetbench gate`: a CI gate on a baseline chosen in the
database). `fleetbench report --html` puts a comparison and a history on its page; their charts
are drawn in the report's one style (report/style.py, report/output.py).
"""
