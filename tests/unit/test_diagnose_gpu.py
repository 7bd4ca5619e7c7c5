"""The GPU path's pure parts (no GPU here): nvidia-smi's query output as numbers, and a node's
figures from its devices'. The text is constructed in the format nvidia-smi(1) documents for
`--query-gpu=... --format=csv,noheader,nounits`: one line per GPU, fields in the queried order,
separated by ", ", `[N/A]` or `[Not Supported]` where a GPU lacks the field."""
import pytest

from fleetbench.diagnose import gpu
from fleetbench.machine import nvsmi

# index, clocks.sm, clocks.max.sm, clocks.mem, clocks.max.mem, temperature.gpu, ecc corrected, ecc uncorrected
TWO_GPUS = """0, 1410, 1410, 1215, 1215, 61, 0, 0
1, 1005, 1410, 1215, 1215, 88, 3, 1
"""


def test_the_query_and_its_parse_agree_on_the_fields():
    cmd = nvsmi.command()
    assert cmd[0] == "nvidia-smi" and cmd[-1] == "--format=csv,noheader,nounits"
    assert cmd[1] == "--query-gpu=" + ",".join(nvsmi.FIELDS)
    rows = nvsmi.parse(TWO_GPUS)
    assert [r["index"] for r in rows] == [0.0, 1.0]
    assert rows[1]["clocks.sm"] == 1005 and rows[1]["temperature.gpu"] == 88
    assert nvsmi.figures(rows[1])["gpu_sm_clock_ratio"] == pytest.approx(1005 / 1410)


def test_unsupported_fields_and_units_left_in():
    rows = nvsmi.parse("0, 1530 MHz, 1530 MHz, 877 MHz, 877 MHz, 45, [N/A], [Not Supported]\n")
    assert rows[0]["clocks.sm"] == 1530 and rows[0]["ecc.errors.uncorrected.volatile.total"] is None
    assert nvsmi.figures(rows[0])["gpu_ecc_uncorrected_errors"] is None


def test_a_line_that_does_not_match_the_query_is_refused():
    with pytest.raises(ValueError, match="3 columns, expected 8"):
        nvsmi.parse("0, 1410, 1410\n")


def test_a_node_is_its_worst_device():
    devices = [{"gpu_matmul_fp32_tflops": 19.0, "gpu_matmul_tf32_tflops": 150.0, "gpu_matmul_fp16_tflops": 250.0,
                "gpu_mem_copy_gbps": 1500.0},
               {"gpu_matmul_fp32_tflops": 12.0, "gpu_matmul_fp16_tflops": 260.0, "gpu_mem_copy_gbps": 1480.0}]
    for device, row in zip(devices, nvsmi.parse(TWO_GPUS)):  # each device's sample, taken under its load
        device.update(nvsmi.figures(row))
    node = gpu.worst(devices)
    assert node["gpu_matmul_fp32_tflops"] == 12.0 and node["gpu_matmul_fp16_tflops"] == 250.0
    assert node["gpu_matmul_tf32_tflops"] == 150.0  # only the device that has TF32 says it
    assert node["gpu_sm_clock_ratio"] == pytest.approx(1005 / 1410) and node["gpu_temperature_c"] == 88
    assert node["gpu_ecc_uncorrected_errors"] == 1 and node["gpu_ecc_corrected_errors"] == 3
    assert gpu.worst([]) == {}  # a CPU node: no GPU figures


def test_every_figure_a_gpu_node_reports_is_a_declared_metric():
    # one name from nvidia-smi's field to the rule: temperature.gpu is read as gpu_temperature_c
    # and nothing else (it was temperature_c in between)
    from fleetbench.diagnose.judging import metrics

    smi = nvsmi.figures(nvsmi.parse(TWO_GPUS)[1])
    combined = {m.name for m in metrics.TABLE if m.combine}
    assert {k for k in smi if k in metrics.METRICS} == combined & set(smi)
    assert smi["gpu_temperature_c"] == 88 and "temperature_c" not in smi
    assert set(gpu.worst([{"gpu_matmul_fp32_tflops": 1.0}, smi])) <= set(metrics.METRICS)
