"""Fit the node-sharing prior (fleetbench/perfmodel/node.py PRIOR; docs/validation/explain.md, "A node-sharing
prior for a prediction from one GPU alone"): validate node.PRIOR_TABLES from their 1-GPU runs
(`world_size=1`) with the prior off, and take (measured / predicted step - 1) / log2(d) over their
1-node cells of d > 1 GPUs: the median is c, the 10th and 90th percentiles its range.

    python -m fleetbench.perfmodel.fit_node_prior [results/reference]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from fleetbench.perfmodel import manifest, node, published, validate


def fitting_rows(reference: Path) -> list[dict]:
    """Validation rows of the prior's tables from their 1-GPU runs, the prior off."""
    records = [json.loads(line) for name in sorted(node.PRIOR_TABLES)
               for line in (reference / f"{name}.jsonl").read_text().splitlines() if line.strip()]
    return validate.validate(published.adopt(records, True), {"world_size": 1}, node_prior=False)


def main(argv: list[str]) -> int:
    reference = Path(argv[0]) if argv else manifest.MANIFEST.parent
    rows = [r for r in fitting_rows(reference) if r.get("predicted_step_ms") and r["nodes"] == 1
            and r["devices_per_node"] > 1]
    c, low, high = node.prior_fit(rows)
    print(f"{len(rows)} cells of {len({r['source'] for r in rows})} tables: "
          f"c = {c:.4f} (10th percentile {low:.4f}, 90th {high:.4f}); node.PRIOR = {node.PRIOR}")
    for row in rows:
        factor = row["measured_step_ms"] / row["predicted_step_ms"]
        print(f"  {row['source']:32} {row['cell']}: x{factor:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
