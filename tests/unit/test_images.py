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
