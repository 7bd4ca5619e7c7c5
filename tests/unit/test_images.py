"""The synthetic image task is what datasets/images.py says: class template + N(0, noise^2) noise."""
import numpy as np
import pytest

from datasets import images


@pytest.mark.parametrize("noise", [0.5, 1.0, 2.0])
def test_every_synthetic_batch_has_the_configured_noise_scale(noise):
    # Before the fix, batch k carried the product of k Gaussian draws (the scale was overwritten by
    # the previous batch's noise array): its std drifts from `noise` and it is far from Gaussian.
    batches = images.synthetic_batches(6, 32, 8, 4, "NCHW", seed=7, rank=0, noise=noise)
    templates = np.random.default_rng(7).standard_normal((4, 3, 8, 8))
    for image, label in batches:
        residual = image.numpy() - templates[label.numpy()[:, 0]]
        assert residual.std() == pytest.approx(noise, rel=0.05)
        # Gaussian, not a product of Gaussians: excess kurtosis near 0 (a product of two has ~6)
        z = residual.ravel() / residual.std()
        assert abs(float(np.mean(z ** 4)) - 3.0) < 0.3


def test_ranks_share_templates_but_not_samples():
    a = images.synthetic_batches(1, 16, 8, 4, "NCHW", seed=1, rank=0)[0][0].numpy()
    b = images.synthetic_batches(1, 16, 8, 4, "NCHW", seed=1, rank=1)[0][0].numpy()
    assert not np.allclose(a, b)


def test_reader_workers_hand_batches_over_in_shared_memory(tmp_path, monkeypatch, capsys):
    # issue 33 finding 10: batches went from the DataLoader's workers through a pipe, pickled (a
    # 224-px batch of 256 is 154 MB): on a GPU node the reader, not the GPU, set the pace
    import os
    from types import SimpleNamespace

    root = images.write_image_folder(tmp_path / "imgs", num_classes=2, images_per_class=4, size=40)
    loader = images.folder_loader(root, 2, 32, "NCHW", 2, 0)
    assert loader.use_shared_memory is True
    assert images.shared_memory_fits(154 << 20, 0) is False  # no workers: nothing to hand over
    # a container's /dev/shm (Docker's default 64 MB) too small for 2 workers' batches of 256 at 224 px:
    # pipes, said in one line
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_bavail=64, f_frsize=1 << 20))
    assert images.shared_memory_fits(256 * 3 * 224 * 224 * 4, 2) is False
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("images: /dev/shm has 64 MiB free, fewer than the 1176 MiB 2 reader worker(s) keep "
                           "in flight; batches go through pipes") and "docker --shm-size" in line
    assert images.folder_loader(root, 2, 32, "NCHW", 2, 0).use_shared_memory is True  # its own small batches fit
