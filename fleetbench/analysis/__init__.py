"""What reads the performance model (fleetbench/model/): validation on held-out and published cells
(validate), the --predict/--validate values (specs), what-if grids (whatif), and stragglers among a
run's ranks (stragglers). Pure: records in, numbers out; only report/ draws.
"""
