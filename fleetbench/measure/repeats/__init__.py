"""Repeats of one experiment (pure, no Paddle): which stored runs are repeats of one cell of work
and what else they ran on (experiment.py: the cell key), how far repeats agree and which of them a
figure keeps (stability.py), and the groups every report and sweep prints, with scaling efficiency
against a measured baseline (aggregate.py). Reports, sweeps, history and the model read records
through here; ranks never import it.
"""
