"""AUC as every CTR benchmark computes it, whatever trains the model (the parameter server's
in-graph `paddle.static.auc` op, or the collective run's dygraph counts): one definition.

Predictions are counted in THRESHOLDS + 1 buckets by the click probability p: bucket
int(p x THRESHOLDS), positives and negatives apart (what `paddle.static.auc` keeps in its
stat_pos / stat_neg). The area is the trapezoid rule over the ROC points met walking the buckets
from the highest score down (what `fleet.metrics.auc` computes): examples in one bucket count as
tied. 0.5 when either class is absent. Buckets of several ranks are summed before the area is
taken, so the AUC is that of all ranks' predictions together, not a mean of per-rank AUCs.
"""
import numpy as np

THRESHOLDS = 4095  # num_thresholds of paddle.static.auc: 4096 buckets


def bucket_index(probability, thresholds: int = THRESHOLDS):
    """The bucket of a click probability in [0, 1] (numpy arrays too): int(p x thresholds)."""
    return (np.asarray(probability, dtype=np.float64) * thresholds).astype(np.int64)


def from_buckets(positives, negatives) -> float:
    """ROC AUC of bucketed predictions (arrays of any shape holding THRESHOLDS + 1 counts)."""
    pos = np.asarray(positives, dtype=np.float64).reshape(-1)[::-1]  # highest score first
    neg = np.asarray(negatives, dtype=np.float64).reshape(-1)[::-1]
    true_pos, false_pos = np.cumsum(pos), np.cumsum(neg)
    total = true_pos[-1] * false_pos[-1] if len(pos) else 0.0
    if total == 0:
        return 0.5
    previous_tp = np.concatenate(([0.0], true_pos[:-1]))
    return float(np.sum(neg * (true_pos + previous_tp) / 2) / total)
