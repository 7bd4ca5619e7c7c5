"""The performance model, in one room: why a multi-device cell is not N times faster, what cells not
measured would do, how right that is, and which hybrid-parallel split fits. Read in the order its
stages run:

    published, modeldef   records completed: what published and GPU records lack; a model outside
                          the registry from its definition
    gradbytes             the bytes and calls a step really sends, at the precision it trained in
    cells                 result records pooled into cells, matched with their controls, 1-device
                          runs and comm records
    alphabeta, nccl       links: the alpha-beta fit of comm records; NCCL's ring and tree
    links, node           the link of a cell no record measured; what a node's run says of its link
    scaling               compute: core sharing from thread scaling
    overlap               how much communication hides behind backward
    breakdown             compute, exposed communication, overlap, imbalance, reader, measured
    predict               the step of an all-reduce cell not measured
    ps                    parameter-server cells: their measured parts, their step predicted
    ranges                the range each prediction carries
    validate, specs       held-out and published cells predicted and scored; --predict/--validate values
    whatif, stragglers    what-if grids; which rank lags
    hybrid, hybrid_search, hybrid_tables, plan_cli
                          hybrid parallel (TP x PP x DP x sharding): the step and memory of a split,
                          the splits that fit, the published tables it is checked on, `fleetbench plan`

Pure: records in, numbers out; nothing here imports paddle or draws (report/ does).
"""
