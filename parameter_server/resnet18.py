"""ResNet18 (or a small CNN) on the synthetic image task through Fleet's parameter server: every
dense parameter lives on the servers; workers pull parameters and push gradients, async or GEO.
The parameter-server half of the ResNet18 pair whose other half is collective/resnet18.py (same
presets file, data, batch, optimizer; fleetbench.train.workloads.resnet18).

    fleetrun --server_num 1 --trainer_num 2 parameter_server/resnet18.py --preset tiny
    fleetrun --server_num 2 --trainer_num 2 parameter_server/resnet18.py --preset small --set mode=geo

Input path: Fleet's datasets read text through a data-generator process, and a dense float slot
is what they offer for fixed-size float input, so an image travels as one dense slot of
3 x size x size values and its label as an integer slot (datasets/image_slots.py, which renders
the same synthetic batches collective rank r trains for worker r). Each worker's file lists its
`steps` batches; figures: images/s and the loss (loss_first, loss_last), as the collective run.
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import dataclasses
import os

from datasets import image_slots
from fleetbench.measure import config
from fleetbench.train import ps
from fleetbench.train.workloads import resnet18


@dataclasses.dataclass
class ResNet18PSConfig(resnet18.ResNet18Settings, ps.PSConfig):
    def validate(self) -> None:
        super().validate()
        config.require(self.passes == 1, "passes", "must be 1: steps sets the run's length, as in the collective "
                       "run (each worker's file holds its steps batches)", self.passes)


def build(cfg: ResNet18PSConfig) -> ps.Workload:
    import paddle
    width = 3 * cfg.image_size * cfg.image_size
    image = paddle.static.data("image", [-1, width], "float32")  # a dense slot: fixed width, no LoD
    label = paddle.static.data("label", [-1, 1], "int64")
    logits = resnet18.network(cfg)(paddle.reshape(image, [-1, 3, cfg.image_size, cfg.image_size]))
    loss = paddle.mean(paddle.nn.functional.cross_entropy(logits, label))
    args = image_slots.pipe_args(cfg.image_size, cfg.num_classes, cfg.batch_size, cfg.synthetic_batches, cfg.seed,
                                 cfg.synthetic_noise)
    return ps.Workload(inputs=[image, label], loss=loss, optimizer=resnet18.optimizer(cfg),
                       pipe_command=ps.pipe_command("datasets.image_slots", *args))


def data_files(cfg: ResNet18PSConfig) -> list:
    """One file per worker (a worker reads every workers-th file: its own), listing its batches."""
    workers = int(os.environ.get("PADDLE_TRAINERS_NUM") or 1)
    key = {"workers": workers, "steps": cfg.steps, "batches": cfg.synthetic_batches}
    folder = ps.synthetic_dir("image-slots", key, lambda out: image_slots.write_files(out, **key))
    return sorted(folder.glob("part-*"))


def first_error(paths) -> None:
    return None  # the files are written here, never by hand; the pipe counts any line it cannot use


if __name__ == "__main__":
    ps.main(__file__, ResNet18PSConfig, build, data_files, first_error)
