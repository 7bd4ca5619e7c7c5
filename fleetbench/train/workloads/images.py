"""What the CNN benchmarks (ResNet50, VGG16) share: image-classification settings and their checks,
and the classification workload (batches + cross entropy) over a model and optimizer a script declares.
With data.val_path (an evaluation folder beside the data.path folder) the run trains `epochs`
epochs and reports top-1/top-5 test accuracy after each (fleetbench.train.epochs); `steps` is
then unused. Data formats and readers are datasets/images.py's."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from datasets import images
from fleetbench.measure import config
from fleetbench.train import epochs, evaluate, loop

if TYPE_CHECKING:  # paddle is imported when a workload is built, after the config was checked
    import paddle


@dataclasses.dataclass
class ImageConfig(epochs.EpochConfig):
    """Image-classification settings; defaults are FleetX's: 224x224, batch 32 per device, fp32."""

    image_size: int = 224
    num_classes: int = 1000  # taken from the folder when data.path is set
    data_format: str = "NCHW"
    momentum: float = 0.9
    weight_decay: float = 1e-4
    synthetic_batches: int = 8  # distinct in-memory batches per rank, cycled
    synthetic_noise: float = 1.0  # noise scale around each class template (template scale is 1)

    def validate(self) -> None:
        super().validate()
        if self.data_format not in ("NCHW", "NHWC"):
            raise config.ConfigError(f"config key 'data_format' must be NCHW or NHWC (got {self.data_format!r})")
        if self.data.path is not None:  # a ValueError here is a one-line config error (config.build)
            self.num_classes = len(images.check_image_folder(self.data.path))
        if self.data.val_path is not None:
            self.check_val_path()

    def check_val_path(self) -> None:
        """An evaluation folder needs a training folder of the same classes and a first epoch
        longer than the warm-up."""
        if self.data.path is None:
            raise config.ConfigError("config key 'data.val_path' needs data.path (a training folder of "
                                     "the same classes)")
        train, held_out = images.check_image_folder(self.data.path), images.check_image_folder(
            self.data.val_path, "data.val_path")
        if sorted(held_out) != sorted(train):
            raise config.ConfigError(f"data.val_path {self.data.val_path}: class folders differ from "
                                     f"data.path's ({len(held_out)} vs {len(train)}; expected the same names)")
        epochs.check_warmup(self, sum(train.values()) // (self.batch_size * epochs.world_size()),
                            f"{sum(train.values())} training images in batches of {self.batch_size}")


def workload(cfg: ImageConfig, model: paddle.nn.Layer,
             optimizer: paddle.optimizer.Optimizer) -> loop.Workload | epochs.EpochWorkload:
    """The classification workload: this rank's batches and cross entropy over `model`."""
    import paddle

    if cfg.data.path:
        batches = images.folder_loader(cfg.data.path, cfg.batch_size, cfg.image_size, cfg.data_format,
                                       cfg.data.num_workers, cfg.seed)
    else:
        batches = images.synthetic_batches(cfg.synthetic_batches, cfg.batch_size, cfg.image_size,
                                           cfg.num_classes, cfg.data_format, cfg.seed,
                                           paddle.distributed.get_rank(), noise=cfg.synthetic_noise)
    cross_entropy = paddle.nn.CrossEntropyLoss()
    parts = dict(model=images.set_data_format(model, cfg.data_format), optimizer=optimizer, batches=batches,
                 loss_fn=lambda net, batch: cross_entropy(net(batch[0]), batch[1]))
    if cfg.data.val_path is None:
        return loop.Workload(**parts)
    return epochs.EpochWorkload(**parts, held_out=held_out_loader(cfg), num_classes=cfg.num_classes, lr=cfg.lr)


def held_out_loader(cfg: ImageConfig) -> paddle.io.DataLoader:
    """This rank's shard of the evaluation folder (evaluate.shard: each image on one rank)."""
    import paddle

    dataset = images.eval_dataset(cfg.data.val_path, cfg.image_size, cfg.data_format)
    mine = paddle.io.Subset(dataset, evaluate.shard(len(dataset), paddle.distributed.get_rank(),
                                                    epochs.world_size()).tolist())
    shared = images.shared_memory_fits(cfg.eval_batch_size * 3 * cfg.image_size ** 2 * 4, cfg.data.num_workers)
    return paddle.io.DataLoader(mine, batch_size=cfg.eval_batch_size, shuffle=False, drop_last=False,
                                num_workers=cfg.data.num_workers, return_list=True, use_shared_memory=shared)
