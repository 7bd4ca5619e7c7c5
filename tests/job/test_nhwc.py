"""data_format=NHWC on the image CNNs (issue 26 finding 6): every conv with a bias must add it on
the channel-last axis. VGG16's convs all have biases (it crashed with "Broadcast dimension
mismatch" before); ResNet50's have none, so it checks the fix does not disturb the bias-free path."""
import paddle
import pytest
from util import records, run_script

from datasets.images import set_data_format


@pytest.mark.parametrize("script", ["collective/vgg16.py", "collective/resnet50.py"])
def test_nhwc_trains_on_cpu_in_one_process(tmp_path, script):
    proc = run_script(script, "--preset", "tiny", "--set", "data_format=NHWC", "--set", "steps=3",
                      "--set", "warmup_steps=1", "--results", tmp_path / "r.jsonl", timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (rec,) = records(tmp_path / "r.jsonl")
    assert rec["error"] is None and rec["config"]["data_format"] == "NHWC"
    assert rec["metrics"]["throughput"] > 0


def test_nhwc_model_computes_what_the_nchw_model_computes():
    """The same weights on the same images, laid out channel-last, give the same logits: the
    layout switch changes memory order only (a wrong bias axis or padding would not)."""
    paddle.seed(0)
    conv = paddle.nn.Sequential(paddle.nn.Conv2D(3, 4, 3, padding=1), paddle.nn.ReLU(),
                                paddle.nn.Conv2D(4, 5, 3, stride=2, padding=[1, 0]))
    x = paddle.rand([2, 3, 9, 9])
    want = conv(x).numpy()
    got = set_data_format(conv, "NHWC")(x.transpose([0, 2, 3, 1])).numpy()
    assert got.transpose(0, 3, 1, 2) == pytest.approx(want, abs=1e-5)
