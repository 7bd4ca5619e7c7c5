"""The all-reduce the backend runs across nodes of several devices (issue 22): NCCL's flat ring
over all GPUs vs gloo's intra-node then inter-node all-reduce, on constructed comm records."""
import pytest

from fleetbench.analysis import alphabeta
from fleetbench.analysis.cells import CommCell, Shape, link_for

# intra-node: 4 ranks at 10 GB/s bus; network "10gbe": 2 nodes x 1 rank at 1.1 GB/s
INTRA = alphabeta.Link(alpha_us=60.0, bandwidth_GBps=10.0, ranks=4, source="intra")
INTER = alphabeta.Link(alpha_us=40.0, bandwidth_GBps=1.1, ranks=2, source="10gbe")
COMM = [CommCell(None, Shape(1, 4), INTRA, None), CommCell("10gbe", Shape(2, 1), INTER, 10.0)]
S = 100e6  # bytes per step


def test_nccl_flat_ring_each_nic_carries_2_n_minus_1_over_n_of_all_gpus():
    link, problem = link_for("10gbe", Shape(2, 4), COMM, backend="nccl")
    assert problem == "" and isinstance(link, alphabeta.FlatRing) and link.ranks == 8
    # 8 GPUs: 2*7/8 of S through the slowest hop (the NIC), 14 ring steps at the larger hop latency
    expected = (2 * 7 / 8 * S / (1.1 * 1e3) + 14 * max(INTRA.hop_alpha_us, INTER.hop_alpha_us)) / 1e3
    assert link.allreduce_ms(S, 1) == pytest.approx(expected)
    assert "NCCL flat ring over 8 GPUs" in link.describe()


def test_gloo_stays_hierarchical_and_costs_more_than_the_flat_ring_here():
    gloo, _ = link_for("10gbe", Shape(2, 4), COMM, backend="gloo")
    nccl, _ = link_for("10gbe", Shape(2, 4), COMM, backend="nccl")
    assert isinstance(gloo, alphabeta.Hierarchical)
    # hierarchical: S over the 2-node ring (factor 1) + 3/2 S inside; flat: 7/4 S over the NIC
    assert gloo.allreduce_ms(S, 1) == pytest.approx(INTRA.allreduce_ms(S, 1) + INTER.allreduce_ms(S, 1))
    assert nccl.allreduce_ms(S, 1) != pytest.approx(gloo.allreduce_ms(S, 1))


def test_flat_ring_bound_by_intra_node_hops_when_they_are_slower():
    slow_intra = alphabeta.Link(alpha_us=0.0, bandwidth_GBps=0.5, ranks=4, source="slow pcie")
    ring = alphabeta.FlatRing(slow_intra, INTER, 8)
    assert ring.allreduce_ms(S, 0) == pytest.approx(2 * 7 / 8 * S / 0.5e3 / 1e3)


@pytest.mark.parametrize("shape", [Shape(1, 4), Shape(4, 1)])
def test_one_node_or_one_device_per_node_is_the_same_for_both_backends(shape):
    nccl, _ = link_for("10gbe", shape, COMM, backend="nccl")
    gloo, _ = link_for("10gbe", shape, COMM, backend="gloo")
    assert nccl == gloo
