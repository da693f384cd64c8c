"""Constants cached by model.rotations.device_constant serve inference and training in one process."""

import numpy as np
import torch

from neural_ik.model import rotations as R


def test_constant_made_in_inference_mode_works_with_autograd():
    constant = np.arange(9.0).reshape(3, 3)
    with torch.inference_mode():
        first = R.device_constant(constant, torch.float64, "cpu")
    assert not first.is_inference()
    x = torch.ones(3, 3, dtype=torch.float64, requires_grad=True)
    (R.device_constant(constant, torch.float64, "cpu") * x).sum().backward()
    assert torch.equal(x.grad, torch.as_tensor(constant))
