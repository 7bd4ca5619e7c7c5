"""What limited a comm run (fleetbench/comm/limits.py): the link, the CPU's reduction, latency, a
busy CPU, or none of them, from constructed figures; and the op table's memory arithmetic it rests on."""
import pytest
from util import limit_consistent as consistent

from fleetbench.comm import limits, opmath

MIB = 1 << 20


def _figures(**kw):
    base = dict(op="all_reduce", ranks=2, busbw_GBps=0.49, at_bytes=32 * MIB, alpha_us=60.0,
                link_GBps=1.11, link_source="raw TCP", triad_GBps=3.1, core_share=1.0)
    return limits.Figures(**dict(base, **kw))


def test_all_reduce_on_a_cpu_reads_and_writes_five_and_a_half_bytes_a_bus_byte():
    # copies in and out of the kernel (4) + half the bus bytes reduced, 2 reads and a write (1.5)
    assert opmath.cpu_bytes_per_bus_byte("all_reduce") == 5.5
    assert opmath.cpu_bytes_per_bus_byte("reduce") == opmath.cpu_bytes_per_bus_byte("reduce_scatter") == 7.0
    assert opmath.cpu_bytes_per_bus_byte("all_gather") == opmath.cpu_bytes_per_bus_byte("broadcast") == 4.0


def test_near_the_link_the_link_is_the_limit():
    limit = limits.judge(_figures(busbw_GBps=1.0))
    assert limit.limit == "link" and limit.share == pytest.approx(1.0 / 1.11)
    assert limit.text == "limited by the link: 1 GB/s busbw, 90% of 1.11 GB/s (raw TCP)"
    assert consistent(limit)


def test_a_slow_triad_names_the_cpus_reduction_with_its_figures():
    limit = limits.judge(_figures())
    assert limit.limit == "cpu_reduction"
    assert limit.ceilings["cpu_reduction"] == pytest.approx(3.1 / 5.5)  # 0.564 GB/s
    assert limit.share == pytest.approx(0.49 / (3.1 / 5.5))
    assert limit.text == ("limited by the CPU's reduction: 0.49 GB/s busbw against 1.11 GB/s link (raw TCP); "
                          "the triad 3.1 GB/s over 5.5 bytes of memory a bus byte allows ~0.564 GB/s")
    assert consistent(limit)


def test_ranks_sharing_cores_share_the_triad():
    # 4 ranks on 2 cores: each gets half a core, so the same triad allows half the busbw
    limit = limits.judge(_figures(busbw_GBps=0.25, ranks=4, core_share=0.5))
    assert limit.limit == "cpu_reduction" and limit.ceilings["cpu_reduction"] == pytest.approx(3.1 * 0.5 / 5.5)
    assert "x 0.5 of a core" in limit.text and consistent(limit)


def test_small_messages_are_limited_by_latency():
    # 4 KiB on 2 ranks: 4096 bus bytes an op; alpha 60 us alone allows 4096 / 60e-6 = 0.068 GB/s
    limit = limits.judge(_figures(busbw_GBps=0.05, at_bytes=4096, triad_GBps=40.0))
    assert limit.limit == "latency"
    assert limit.ceilings["latency"] == pytest.approx(4096 / 60e-6 / 1e9)
    assert "alpha 60 us is 73% of the 4 KiB op's 81.9 us" in limit.text  # 4096 B / 0.05 GB/s = 81.9 us
    assert consistent(limit)


def test_far_below_every_ceiling_nothing_is_named_and_every_ceiling_is_given():
    # a fast triad (40 GB/s: ~7.3 GB/s allowed), latency negligible at 32 MiB, 44% of the link
    limit = limits.judge(_figures(triad_GBps=40.0))
    assert limit.limit == "unexplained" and limit.share == pytest.approx(0.49 / 1.11)
    assert limit.text.startswith("not explained by link, CPU reduction or latency: 0.49 GB/s busbw against "
                                 "1.11 GB/s link (raw TCP); the triad 40 GB/s")
    assert "alpha 60 us is 0.1% of the 32 MiB op's" in limit.text and consistent(limit)


def test_a_saturated_cpu_names_the_busy_cpu_with_whose_time_it_was():
    # the same figures, the machine's CPU 97% busy in the ops: 40% this job, 57% other processes
    limit = limits.judge(_figures(triad_GBps=40.0, job_cpu_pct=40.0, others_cpu_pct=57.0))
    assert limit.limit == "cpu_busy" and limit.busy_pct == 97.0
    assert limit.text.startswith("limited by the CPU, busy: 97% of the machine's CPU time while the ops ran "
                                 "(this job 40%, other processes 57%); 0.49 GB/s busbw against 1.11 GB/s")
    assert consistent(limit)
    # 80% busy leaves cores idle: not the CPU's time, and the text says how busy it was
    idle = limits.judge(_figures(triad_GBps=40.0, job_cpu_pct=40.0, others_cpu_pct=40.0))
    assert idle.limit == "unexplained" and "the machine's CPU 80% busy (other processes 40%)" in idle.text
    assert consistent(idle)
    # a ceiling that explains the run comes first: a slow triad on a busy machine is the reduction's
    assert limits.judge(_figures(job_cpu_pct=40.0, others_cpu_pct=57.0)).limit == "cpu_reduction"


def test_no_probe_and_no_link_say_what_was_not_measured():
    limit = limits.judge(_figures(triad_GBps=None, link_GBps=None, alpha_us=60.0))
    assert limit.limit == "unexplained" and limit.ceilings["cpu_reduction"] is None
    assert limit.text.endswith("cpu_reduction: no figure") and consistent(limit)
    assert limits.judge(_figures(triad_GBps=None, link_GBps=None, alpha_us=None)).share is None


def test_an_alpha_above_the_ops_own_time_is_no_latency():
    # noise at small sizes fitted alpha 7.9 ms where the 4 KiB op took 219 us: no latency figure
    limit = limits.judge(_figures(busbw_GBps=0.0187, at_bytes=4096, alpha_us=7900.0, link_GBps=None))
    assert limit.ceilings["latency"] is None and limit.limit == "unexplained"
    assert limit.text.endswith("latency: no figure")


def _record(network, tcp=None, probe=(3.0, 3.2), backend="gloo", world=2, cores=2):
    rows = [opmath.row("all_reduce", s, s // 4, s / 0.49e9, world, 0) for s in (MIB, 32 * MIB)]
    metrics = dict(opmath.metrics(["all_reduce"], rows, world, 64 * MIB), link_tcp_GBps=tcp,
                   probe_triad_gbps_before=probe[0], probe_triad_gbps_after=probe[1],
                   job_cpu_pct=55.0, interference_cpu_pct=5.0)
    return {"world_size": world, "devices_per_node": 1, "network": network, "metrics": metrics,
            "config": {"runtime": {"backend": backend}}, "env": {"cpu": {"usable_threads": cores}}}


def test_a_stored_record_gives_its_figures():
    emulated = {"profile": "10gbe", "rate_gbit": 10.0, "emulated": True}
    f = limits.of_record(_record(emulated, tcp=1.15))
    assert (f.link_GBps, f.link_source, f.triad_GBps, f.at_bytes) == (1.15, "raw TCP", 3.1, 32 * MIB)
    assert (f.job_cpu_pct, f.others_cpu_pct, f.busy_pct) == (55.0, 5.0, 60.0)
    f = limits.of_record(_record(emulated, world=4))  # no TCP figure: the shaped rate, 4 ranks on 2 cores
    assert (f.link_GBps, f.link_source, f.core_share) == (1.25, "shaped 10gbe", 0.5)
    assert limits.of_record(_record(emulated, backend="nccl")).triad_GBps is None  # reduced on the GPU
    assert limits.of_record(_record(None)).link_GBps is None
    unfitted = _record(emulated)
    unfitted["metrics"]["ops"]["all_reduce"]["bandwidth_GBps"] = None  # alpha is then a mean time
    assert limits.of_record(unfitted).alpha_us is None
