"""host.hbm / host.view are exact reinterpretations of storage and dispatch no compute op."""
from __future__ import annotations

import os

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from neuron_inductor.runtime import host


class RecordOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


#: aliasing views and allocations; ``detach`` is how view(dtype) re-wraps its result under a mode
# "empty" + "set_": host.view aliases a kernel buffer without making an autograd view
VIEW_OR_ALLOC = {"as_strided", "view", "empty_strided", "alias", "detach", "empty", "set_"}


def test_hbm_float_span_of_strided_view():
    base = torch.arange(40, dtype=torch.float32).reshape(5, 8)
    t = base[1:4, 2:7].t()  # size (5, 3), stride (1, 8), offset 10
    flat = host.hbm(t, "float32")
    assert flat.shape == (1 + 4 * 1 + 2 * 8,) and flat.is_contiguous()
    assert flat.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()  # no copy
    assert flat[0].item() == t[0, 0].item() and flat[-1].item() == t[-1, -1].item()
    back = host.view(flat, t.shape, t.stride(), 0, "float32")
    assert torch.equal(back, t)


def test_int64_travels_as_int32_words():
    t = torch.tensor([[1, -2, 2**40 + 7], [-(2**35), 0, 2**31]], dtype=torch.int64)[:, 1:]
    words = host.hbm(t, "int32")
    assert words.dtype == torch.int32 and words.numel() == 2 * (1 + 1 * 1 + 1 * 3)
    assert words[0].item() == -2 and words[1].item() == -1  # low word at the even index
    back = host.view(words, t.shape, t.stride(), 0, "int64")
    assert back.dtype == torch.int64 and torch.equal(back, t)


def test_bool_travels_as_uint8():
    base = torch.tensor([True, False, True, True, False, False])
    t = base[1:5]
    b = host.hbm(t, "uint8")
    assert b.dtype == torch.uint8 and b.tolist() == [0, 1, 1, 0]
    assert torch.equal(host.view(b, (4,), (1,), 0, "bool"), t)


def test_view_offset_and_bounds():
    buf = torch.arange(12, dtype=torch.float32)
    v = host.view(buf, (2, 3), (3, 1), 5, "float32")
    assert v.tolist() == [[5, 6, 7], [8, 9, 10]]
    with pytest.raises(ValueError, match="needs 13 elements"):
        host.view(buf, (2, 3), (3, 1), 7, "float32")


def test_refuses_conversions_and_empty():
    with pytest.raises(TypeError, match="conversion"):
        host.hbm(torch.ones(4, dtype=torch.float32), "bfloat16")
    with pytest.raises(TypeError, match="conversion"):
        host.hbm(torch.ones(4, dtype=torch.float64), "float32")
    with pytest.raises(ValueError, match="no elements"):
        host.hbm(torch.ones(0, 3), "float32")


def test_empty():
    e = host.empty((0, 3), (3, 1), "float32")
    assert e.shape == (0, 3) and e.stride() == (3, 1) and e.dtype == torch.float32


def test_host_helpers_dispatch_no_compute():
    x = torch.arange(12, dtype=torch.int64).reshape(3, 4)[:, 1:]
    m = torch.tensor([True, False, True])
    f = torch.ones(4)
    with RecordOps() as rec:
        words = host.hbm(x, "int32")
        host.view(words, x.shape, x.stride(), 0, "int64")
        b = host.hbm(m, "uint8")
        host.view(b, (3,), (1,), 0, "bool")
        host.hbm(f, "float32")
        host.empty((2, 2), (2, 1), "float16")
    ops = set(rec.ops)
    assert ops and ops <= VIEW_OR_ALLOC, ops


def test_fallback_counters():
    host.reset_fallback_counts()
    host.count_fallback("aten.foo.default")
    host.count_fallback("aten.foo.default")
    snap = host.fallback_counts()
    assert snap == {"aten.foo.default": 2}
    snap["aten.foo.default"] = 99  # a snapshot, not the live table
    assert host.fallback_counts()["aten.foo.default"] == 2


def test_load_sibling_unique_per_directory(tmp_path):
    for d, val in (("a", 1), ("b", 2)):
        (tmp_path / d).mkdir()
        (tmp_path / d / "kernels.py").write_text(f"VALUE = {val}\n")
        (tmp_path / d / "wrapper.py").write_text("")
    ma = host.load_sibling(str(tmp_path / "a" / "wrapper.py"), "kernels")
    mb = host.load_sibling(str(tmp_path / "b" / "wrapper.py"), "kernels")
    assert (ma.VALUE, mb.VALUE) == (1, 2) and ma.__name__ != mb.__name__
    assert os.path.samefile(ma.__file__, tmp_path / "a" / "kernels.py")


def test_conform_converts_only_results_whose_dtype_differs():
    """A declared fallback's eager result in another dtype than the graph's fake tensor is
    converted; matching results are returned as they are (no copy); non-tensors pass through."""
    a, b = torch.ones(3, dtype=torch.bfloat16), torch.zeros(2)
    out = host.conform((a, b, 7), ("float32", "float32", None))
    assert out[0].dtype == torch.float32 and out[1] is b and out[2] == 7
    assert host.conform(a, "bfloat16") is a
    ret = torch.return_types.max((a, torch.zeros(3, dtype=torch.long)))
    conformed = host.conform(ret, ("float32", "int64"))
    assert type(conformed) is type(ret) and conformed.values.dtype == torch.float32
    assert len(host.conform((a, b), ("float32",))) == 2  # fewer dtypes than results: none dropped
    u = torch.zeros(2, dtype=torch.uint64)  # no kernel dtype, but a fallback may return it
    assert host.conform(u, "uint64") is u
