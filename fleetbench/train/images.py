"""What the CNN benchmarks (ResNet50, VGG16) share: image-classification settings and their checks,
and the classification workload (batches + cross entropy) over a model and optimizer a script declares.
Data formats and readers are datasets/images.py's."""
import dataclasses

from datasets import images
from fleetbench.measure import config
from fleetbench.train import loop


@dataclasses.dataclass
class ImageConfig(config.CollectiveConfig):
    """Image-classification settings; defaults are FleetX's: 224x224, batch 32 per device, fp32."""

    image_size: int = 224
    num_classes: int = 1000  # taken from the folder when data.path is set
    data_format: str = "NCHW"
    momentum: float = 0.9
    weight_decay: float = 1e-4
    synthetic_batches: int = 8  # distinct in-memory batches per rank, cycled
    synthetic_noise: float = 1.0  # noise scale around each class template (template scale is 1)

    def validate(self):
        super().validate()
        if self.data_format not in ("NCHW", "NHWC"):
            raise config.ConfigError(f"config key 'data_format' must be NCHW or NHWC (got {self.data_format!r})")
        if self.data.path is not None:  # a ValueError here is a one-line config error (config.build)
            self.num_classes = images.check_image_folder(self.data.path)


def workload(cfg: ImageConfig, model, optimizer):
    """The classification workload: this rank's batches and cross entropy over `model`."""
    import paddle

    if cfg.data.path:
        batches = images.folder_loader(cfg.data.path, cfg.batch_size, cfg.image_size, cfg.data_format,
                                       cfg.data.num_workers, cfg.seed)
    else:
        batches = images.synthetic_batches(cfg.synthetic_batches, cfg.batch_size, cfg.image_size,
                                           cfg.num_classes, cfg.data_format, cfg.seed,
                                           paddle.distributed.get_rank(), cfg.synthetic_noise)
    cross_entropy = paddle.nn.CrossEntropyLoss()
    return loop.Workload(model=images.set_data_format(model, cfg.data_format), optimizer=optimizer,
                         batches=batches, loss_fn=lambda net, batch: cross_entropy(net(batch[0]), batch[1]))
