"""Convert the third held-out set of NVIDIA DeepLearningExamples tables (commit 729963dd) into
schema-1 published records, for `fleetbench explain --published` (issue 47, point 7: tables never
used for fitting).

Selection rule, written down before any prediction was run on these tables:

    Third held-out set (issue 47), rule written 2026-11-29 before any prediction on these tables:
    every training-throughput table of a README of github.com/NVIDIA/DeepLearningExamples at commit
    729963dd that (1) has rows at two or more GPU counts, (2) trains from scratch (training or
    pretraining; not fine-tuning, not inference), data-parallel only, (3) is of a model that is NOT
    in the first two sets -- image-classification CNNs other than ResNet-50 v1.5 (ResNeXt101-32x4d,
    SE-ResNeXt101-32x4d, EfficientNet and the like) and machine-translation models (Transformer,
    GNMT) -- whose every trainable tensor can be written from its published architecture and
    configuration as a `layers` model definition (fleetbench/model/modeldef.py) whose parameter count
    matches the count the README or the model's code states (within 0.5%), and (4) is not yet in
    results/reference/. A table that repeats another README's figures counts once, at the model's
    own README. Every printed figure of a selected table is a record; a cell printed N/A is not a
    figure. No table or cell is dropped after its result is seen; a table or model the rule selects
    but that cannot be described is listed in the docstring with the reason.

The tables it yields, the models' parameter counts and the commands that write the records follow
once the READMEs are read (nothing converted or predicted yet).
"""
from __future__ import annotations

import sys


def main(argv=None) -> int:
    print("convert_dle_third.py: the rule only; the converter follows", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
