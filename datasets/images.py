"""Image classification data for the CNN benchmarks (ResNet50, VGG16).

Two sources, the same batches for the loop:
- synthetic: a learnable task held in memory, generated once per rank (never per step), so the
  reader costs nothing and loss can fall: each class has a fixed random template and an image is
  its class template plus Gaussian noise of a chosen scale;
- an ImageNet-style folder (one sub-folder of JPEG/PNG files per class), decoded and augmented by
  `paddle.io.DataLoader` worker processes and sharded across ranks by DistributedBatchSampler;
  an evaluation folder of the same classes (`data.val_path`) is read by `eval_dataset`.

The CNN scripts' shared config and workload live with the training code (fleetbench.train.workloads.images).
`write_image_folder` writes a small folder of real JPEG files in that layout for tests and demos.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # Paddle is imported where it is used: the pure helpers run without it
    import paddle

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp")
IMAGENET_MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
IMAGENET_STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def synthetic_arrays(num_batches: int, batch_size: int, image_size: int, num_classes: int, seed: int, rank: int,
                     noise: float = 1.0) -> list[tuple[np.ndarray, np.ndarray]]:
    """`num_batches` (images NCHW float32, labels int64) numpy pairs; templates are shared by all
    ranks, samples are not. Numpy only: the parameter server's image pipe makes the same ones."""
    templates = np.random.default_rng(seed).standard_normal((num_classes, 3, image_size, image_size))
    rng = np.random.default_rng([seed, rank])
    batches = []
    for _ in range(num_batches):
        labels = rng.integers(0, num_classes, size=batch_size)
        # a fresh draw scaled by `noise` for every batch (the scale itself is never overwritten)
        images = (templates[labels] + noise * rng.standard_normal((batch_size, 3, image_size, image_size)))
        batches.append((images.astype("float32"), labels.astype("int64")))
    return batches


def synthetic_batches(num_batches: int, batch_size: int, image_size: int, num_classes: int, data_format: str,
                      seed: int, rank: int, *, noise: float = 1.0) -> list[tuple[paddle.Tensor, paddle.Tensor]]:
    """synthetic_arrays as (image, label) tensor pairs in `data_format`, labels shaped (batch, 1)."""
    import paddle

    batches = []
    for images, labels in synthetic_arrays(num_batches, batch_size, image_size, num_classes, seed, rank, noise):
        if data_format == "NHWC":
            images = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
        batches.append((paddle.to_tensor(images), paddle.to_tensor(labels[:, None])))
    return batches


def check_image_folder(path: str | Path, key: str = "data.path") -> dict:
    """{class folder name: number of images} of an ImageNet-style folder, or ValueError naming
    the config key, the folder and what is wrong."""
    root = Path(path)
    if not root.is_dir():
        raise ValueError(f"{key} {root}: not a directory (expected one sub-folder of images per class)")
    classes = sorted(d for d in root.iterdir() if d.is_dir())
    if not classes:
        raise ValueError(f"{key} {root}: no class sub-folders (expected <root>/<class>/<image>.jpg)")
    counts = {d.name: sum(f.suffix.lower() in IMAGE_EXTENSIONS for f in d.iterdir()) for d in classes}
    empty = [name for name, count in counts.items() if count == 0]
    if empty:
        raise ValueError(f"{key} {root}: class folder '{empty[0]}' has no images {IMAGE_EXTENSIONS}")
    return counts


def _to_normalized_array(data_format: str) -> list:
    """The transform steps after cropping: a float array in the layout, ImageNet-normalised."""
    from paddle.vision import transforms as T

    return [T.Transpose() if data_format == "NCHW" else (lambda img: np.asarray(img, dtype="float32")),
            T.Normalize(IMAGENET_MEAN, IMAGENET_STD, data_format="CHW" if data_format == "NCHW" else "HWC")]


def eval_dataset(path: str | Path, image_size: int, data_format: str) -> paddle.io.Dataset:
    """An evaluation folder as a Dataset: resize to image_size x 256/224, centre crop, normalise
    (the standard ImageNet evaluation transform); class indices follow the sorted folder names."""
    from paddle.vision import transforms as T
    from paddle.vision.datasets import DatasetFolder

    transform = T.Compose([T.Resize(image_size * 256 // 224), T.CenterCrop(image_size),
                           *_to_normalized_array(data_format)])
    return DatasetFolder(str(path), transform=transform, extensions=IMAGE_EXTENSIONS)


def folder_loader(path: str | Path, batch_size: int, image_size: int, data_format: str, num_workers: int,
                  seed: int) -> paddle.io.DataLoader:
    """DataLoader over an ImageNet-style folder with the standard training augmentation."""
    import paddle
    from paddle.vision import transforms as T
    from paddle.vision.datasets import DatasetFolder

    transform = T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(),
                           *_to_normalized_array(data_format)])
    dataset = DatasetFolder(str(path), transform=transform, extensions=IMAGE_EXTENSIONS)
    sampler = paddle.io.DistributedBatchSampler(dataset, batch_size=batch_size, shuffle=True, drop_last=True)
    sampler.set_epoch(seed)
    if len(sampler) == 0:
        raise ValueError(f"data.path {path}: {len(dataset)} images are fewer than one batch of "
                         f"{batch_size} per rank")
    shared = shared_memory_fits(batch_size * 3 * image_size * image_size * 4, num_workers)
    return paddle.io.DataLoader(dataset, batch_sampler=sampler, num_workers=num_workers,
                                return_list=True, use_shared_memory=shared)


# Batches Paddle's DataLoader keeps in flight per worker (its prefetch_factor's default, 2.6.2 and 3.3.1).
PREFETCH = 2


def shared_memory_fits(batch_bytes: int, num_workers: int, shm: str = "/dev/shm") -> bool:
    """Whether worker processes can hand batches over in shared memory: /dev/shm must hold the
    batches in flight (workers x PREFETCH, twice over for the copy the trainer takes). Without it a
    224-px batch of 256 (154 MB in float32) is pickled through a pipe, and the reader, not the GPU,
    sets the pace (issue 33, finding 10). Containers often have 64 MB of /dev/shm: then batches take
    the pipe, and one line on stderr says so and how to give the container more."""
    if num_workers == 0:
        return False  # read in the trainer's own process: nothing to hand over
    need = 2 * batch_bytes * num_workers * PREFETCH
    try:
        stat = os.statvfs(shm)
    except OSError:
        free = 0
    else:
        free = stat.f_bavail * stat.f_frsize
    if free >= need:
        return True
    print(f"images: {shm} has {free >> 20} MiB free, fewer than the {need >> 20} MiB {num_workers} reader "
          f"worker(s) keep in flight; batches go through pipes, slower: give the container a larger {shm} "
          f"(docker --shm-size; Kubernetes: a Memory emptyDir at {shm}, which fleetbench k8s --gpus adds)",
          file=sys.stderr, flush=True)
    return False


def set_data_format(model: paddle.nn.Layer, data_format: str) -> paddle.nn.Layer:
    """Switch a paddle.vision CNN between NCHW and NHWC in place.

    paddle.vision.models builds NCHW layers only; conv, batch-norm and pooling layers all take the
    layout from one attribute at run time, so flipping it gives the channels-last model that GPU
    tensor cores prefer without re-implementing the network.
    """
    if data_format == "NCHW":
        return model
    for layer in model.sublayers(include_self=True):
        for attr in ("_data_format", "data_format"):
            if getattr(layer, attr, None) == "NCHW":
                setattr(layer, attr, data_format)
        if isinstance(layer, _conv2d_class()):
            _conv_channels_last(layer)
    return model


def _conv_channels_last(conv: paddle.nn.Conv2D) -> None:
    """Redo what Conv2D.__init__ derives from its layout (paddle/nn/layer/conv.py _ConvNd, 2.6.2
    :103-142, 3.3.1 :134-173): the bias is added on `_channel_dim` (else "Broadcast dimension
    mismatch" on the first conv with a bias, issue 26 finding 6) and the padding list is laid out
    for channel-last inputs."""
    from paddle.nn.functional.conv import _update_padding_nd

    conv._channel_dim = 3
    padding = conv._padding if conv._padding_mode == "zeros" else 0
    conv._updated_padding, conv._padding_algorithm = _update_padding_nd(padding, True, 2)


def write_image_folder(out: str | Path, num_classes: int = 2, images_per_class: int = 8, size: int = 40,
                       seed: int = 0) -> Path:
    """Write real JPEG files in ImageNet layout: <out>/class<k>/<i>.jpg. Returns the root path."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for k in range(num_classes):
        folder = Path(out) / f"class{k:03d}"
        os.makedirs(folder, exist_ok=True)
        for i in range(images_per_class):
            pixels = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
            pixels[..., k % 3] = 255 - pixels[..., k % 3] // 4  # a class-dependent colour cast
            Image.fromarray(pixels).save(folder / f"{i:04d}.jpg", quality=90)
    return Path(out)


def _conv2d_class() -> type:
    import paddle  # this module's pure helpers stay importable without Paddle

    return paddle.nn.Conv2D
