"""Why not better: the step time of every multi-device cell taken apart, and predicted.

    alphabeta  the latency-bandwidth (alpha-beta) model of ring all-reduce, fitted on comm records
    cells      result records pooled into cells (repeats averaged) and the matching of a cell with
               its method=none control, its 1-device run and its comm record
    breakdown  compute, exposed and predicted communication, overlap, imbalance, reader; the
               scaling efficiency lost to each
    predict    step time and throughput of cells not measured; validation on held-out cells
    explain    `fleetbench explain`: console table, JSON, markdown section, stacked-bar charts

A sub-package, not report/explain.py: the model is several pure parts (fit, match, account,
predict, validate) that tests and other tools use without matplotlib; only explain.py draws.
It reads records only (measure.results); nothing here imports paddle.
"""
