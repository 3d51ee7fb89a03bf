"""Regressions found by running HF Trainer through the backend: what ``host.view`` hands back."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

from neuron_inductor.runtime import host


def test_view_aliases_the_buffer_without_being_an_autograd_view():
    buf = torch.arange(10.0)
    t = host.view(buf, (2, 3), (3, 1), 2, "float32")
    assert not t._is_view()  # an autograd view out of CompiledFunction refuses in-place updates
    assert t.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()
    torch.testing.assert_close(t, torch.tensor([[2.0, 3, 4], [5, 6, 7]]))
    w = host.view(torch.zeros(6, dtype=torch.int32), (2,), (1,), 1, "int64")  # words -> int64, offset
    assert w.shape == (2,) and w.storage_offset() == 1 and not w._is_view()


def test_view_of_a_numpy_bfloat16_buffer():
    # a kernel with no tensor arguments (e.g. a bf16 scalar_tensor) returns numpy from the simulator
    arr = np.array([1.5, -2.0], dtype=ml_dtypes.bfloat16)
    t = host.view(arr, (), (), 1, "bfloat16")
    assert t.dtype == torch.bfloat16 and t.item() == -2.0


def test_compiled_output_can_be_updated_in_place_before_backward():
    """Trainer does ``loss *= scale`` on the compiled model's output, then ``loss.backward()``."""
    def f(x, w):
        return ((x @ w).relu() ** 2).mean()

    x, w = torch.randn(4, 8), torch.randn(8, 3, requires_grad=True)
    loss = torch.compile(f, backend="neuron")(x, w)
    loss *= 2.0
    loss.backward()
    w2 = w.detach().clone().requires_grad_(True)
    (f(x, w2) * 2.0).backward()
    torch.testing.assert_close(w.grad, w2.grad)


def test_bf16_scalar_constant_in_a_compiled_graph():
    def f(x):
        return x * torch.tensor(0.5, dtype=torch.bfloat16) + torch.finfo(torch.bfloat16).min * 0

    x = torch.randn(4, 4, dtype=torch.bfloat16)
    torch.testing.assert_close(torch.compile(f, backend="neuron")(x), f(x))
