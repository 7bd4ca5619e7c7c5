"""ResNet50 data-parallel training through Fleet collective mode.

    fleetrun --nproc_per_node 2 collective/resnet50.py --preset tiny     # CPU, gloo
    fleetrun --gpus 0,1,2,3,4,5,6,7 collective/resnet50.py               # GPUs, NCCL
"""
import fleetbench  # noqa: F401  (first: sets OpenMP threads before paddle starts)

import dataclasses

import paddle

from datasets import images
from fleetbench import config, loop


@dataclasses.dataclass
class ResNet50Config(config.CollectiveConfig):
    # FleetX's setup: 224x224, batch 32 per device, fp32, momentum SGD.
    image_size: int = 224
    num_classes: int = 1000
    data_format: str = "NCHW"
    momentum: float = 0.9
    weight_decay: float = 1e-4
    synthetic_batches: int = 8  # distinct in-memory batches per rank, cycled
    synthetic_noise: float = 1.0  # noise scale around each class template (template scale is 1)

    def validate(self):
        super().validate()
        if self.data_format not in ("NCHW", "NHWC"):
            raise config.ConfigError(f"config key 'data_format' must be NCHW or NHWC (got {self.data_format!r})")
        if self.data.path is not None:
            try:
                self.num_classes = images.check_image_folder(self.data.path)
            except ValueError as err:
                raise config.ConfigError(str(err)) from None


def build(cfg: ResNet50Config) -> loop.Workload:
    model = images.set_data_format(paddle.vision.models.resnet50(num_classes=cfg.num_classes), cfg.data_format)
    optimizer = paddle.optimizer.Momentum(learning_rate=cfg.lr, momentum=cfg.momentum,
                                          weight_decay=cfg.weight_decay, parameters=model.parameters())
    if cfg.data.path:
        batches = images.folder_loader(cfg.data.path, cfg.batch_size, cfg.image_size, cfg.data_format,
                                       cfg.data.num_workers, cfg.seed)
    else:
        batches = images.synthetic_batches(cfg.synthetic_batches, cfg.batch_size, cfg.image_size,
                                           cfg.num_classes, cfg.data_format, cfg.seed,
                                           paddle.distributed.get_rank(), cfg.synthetic_noise)
    cross_entropy = paddle.nn.CrossEntropyLoss()
    return loop.Workload(model=model, optimizer=optimizer, batches=batches, unit="images/s",
                         loss_fn=lambda net, batch: cross_entropy(net(batch[0]), batch[1]))


if __name__ == "__main__":
    loop.main("resnet50", ResNet50Config, build)
