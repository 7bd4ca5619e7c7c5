"""The all-reduce the backend runs across nodes of several devices (issues 22, 36): NCCL's rings and
trees over all GPUs, the one it picks at each size, and gloo's intra-node then inter-node
all-reduce, on constructed links."""
import math

import pytest

from fleetbench.perfmodel import alphabeta, nccl
from fleetbench.perfmodel.cells import CommCell, Shape, link_for

# intra-node: 4 ranks at 10 GB/s bus; network "10gbe": 2 nodes x 1 rank at 1.1 GB/s
INTRA = alphabeta.Link(alpha_us=60.0, bandwidth_GBps=10.0, ranks=4, source="intra")
INTER = alphabeta.Link(alpha_us=40.0, bandwidth_GBps=1.1, ranks=2, source="10gbe")
COMM = [CommCell(None, Shape(1, 4), INTRA, None), CommCell("10gbe", Shape(2, 1), INTER, 10.0)]
S = 100e6  # bytes per step


def test_nccl_ring_each_nic_carries_2_n_minus_1_over_n_of_all_gpus():
    link, problem = link_for("10gbe", Shape(2, 4), COMM, backend="nccl")
    assert problem == "" and isinstance(link, nccl.NcclLink) and link.ranks == 8
    # 8 GPUs: 2*7/8 of S through the slowest hop (the NIC); 14 ring steps, 2 of them across nodes
    expected = 2 * 7 / 8 * S / (1.1 * 1e3) + 12 * INTRA.hop_alpha_us + 2 * INTER.hop_alpha_us
    assert link.ring_us(S) == pytest.approx(expected)
    assert link.pick(S) == ("ring", pytest.approx(expected))  # one large call: the ring's bandwidth wins
    assert link.allreduce_ms(S, 1) == pytest.approx(expected / 1e3)
    assert "NCCL over 2x4 GPUs" in link.describe()


def test_tree_latency_grows_with_log2_of_the_nodes_and_wins_for_small_calls_at_scale():
    intra = alphabeta.Link(0.0, 200.0, 8, "nvswitch").with_hop_us(3.4, "")
    net = alphabeta.Link(0.0, 100.0, 2, "8 NICs").with_hop_us(14.0, "")
    big = nccl.NcclLink(intra, net, nodes=512, per_node=8)
    n = 512 * 8
    ring_latency = (2 * (n - 1) - 2 * 511) * 3.4 + 2 * 511 * 14.0
    tree_latency = 2 * (7 * 3.4 + math.log2(512) * 14.0)
    assert big.ring_us(0) == pytest.approx(ring_latency) and big.tree_us(0) == pytest.approx(tree_latency)
    assert big.pick(25 * 2**20)[0] == "tree"  # a 25 MiB bucket on 4096 GPUs: latency decides
    assert big.tree_us(1e9) - tree_latency == pytest.approx(2 * 1e9 / (nccl.TREE_SHARE * 100.0e3))
    small = nccl.NcclLink(intra, net, nodes=2, per_node=8)
    assert small.pick(1e9)[0] == "ring"  # 2 nodes, 1 GB: the ring's 8% more bandwidth decides
    forced = nccl.NcclLink(intra, net, nodes=512, per_node=8, algorithm="ring")
    assert forced.pick(25 * 2**20) == ("ring", pytest.approx(big.ring_us(25 * 2**20)))


def test_gloo_stays_hierarchical_and_sends_less_over_the_nic_than_nccls_ring():
    gloo, _ = link_for("10gbe", Shape(2, 4), COMM, backend="gloo")
    nccl_link, _ = link_for("10gbe", Shape(2, 4), COMM, backend="nccl")
    assert isinstance(gloo, alphabeta.Hierarchical)
    # hierarchical: S over the 2-node ring (factor 1) + 3/2 S inside; NCCL's ring: 7/4 S over the NIC
    assert gloo.allreduce_ms(S, 1) == pytest.approx(INTRA.allreduce_ms(S, 1) + INTER.allreduce_ms(S, 1))
    assert nccl_link.allreduce_ms(S, 1) == pytest.approx(nccl_link.ring_us(S) / 1e3)
    assert nccl_link.allreduce_ms(S, 1) > INTER.allreduce_ms(S, 1) * 1.7


def test_ring_bound_by_intra_node_hops_when_they_are_slower():
    slow_intra = alphabeta.Link(alpha_us=0.0, bandwidth_GBps=0.5, ranks=4, source="slow pcie")
    ring = nccl.NcclLink(slow_intra, alphabeta.Link(0.0, 1.1, 2, "net"), 2, 4)
    assert ring.allreduce_ms(S, 0) == pytest.approx(2 * 7 / 8 * S / 0.5e3 / 1e3)


def test_one_gpu_a_node_is_an_nccl_link_too_and_one_node_is_the_nodes_ring():
    multi, _ = link_for("10gbe", Shape(4, 1), COMM, backend="nccl")
    assert isinstance(multi, nccl.NcclLink) and multi.per_node == 1 and multi.nodes == 4
    assert multi.ring_us(S) == pytest.approx(2 * 3 / 4 * S / 1.1e3 + 6 * INTER.hop_alpha_us)
    one_node_nccl, _ = link_for("10gbe", Shape(1, 4), COMM, backend="nccl")
    one_node_gloo, _ = link_for("10gbe", Shape(1, 4), COMM, backend="gloo")
    assert one_node_nccl == one_node_gloo == INTRA
    assert link_for("10gbe", Shape(4, 1), COMM, backend="gloo")[0] == INTER.at(4)


@pytest.mark.parametrize("matrix, kind, links", [
    ({g: {o: "NV12" for o in "0123" if o != g} for g in "0123"}, "nvswitch", 12),
    # a hybrid cube mesh row: NV1/NV2 to some GPUs, PCIe (NODE) to others; rings stay on NVLink
    ({"0": {"1": "NV2", "2": "NV1", "3": "NODE"}, "1": {"0": "NV2", "2": "NODE", "3": "NV1"},
      "2": {"0": "NV1", "1": "NODE", "3": "NV2"}, "3": {"0": "NODE", "1": "NV1", "2": "NV2"}}, "nvlink", 3),
    ({g: {o: "PIX" for o in "01" if o != g} for g in "01"}, "pcie", None),
])
def test_node_link_read_from_an_nvidia_smi_matrix(matrix, kind, links):
    assert nccl.from_matrix({"gpus": sorted(matrix), "links": matrix}, "A100-SXM4-80GB") == (kind, links)


def test_intra_node_rates_by_gpu_generation():
    assert nccl.intra_GBps("nvswitch", "NVIDIA A100-SXM4-80GB", 12)[0] == 300.0
    assert nccl.intra_GBps("nvlink", "Tesla V100-SXM2-16GB")[0] == 150.0
    assert nccl.intra_GBps("pcie", "Tesla T4")[0] == 15.75
    rate, how = nccl.intra_GBps("pcie", "Mystery GPU")
    assert rate == 15.75 and "3.0 assumed" in how
