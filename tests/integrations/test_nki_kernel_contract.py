"""Hand-written kernels meet the same namespace and contract as generated ones (issue 25 rows 3,
13, 14): no escape through ``nl``, no writes into inputs of a functional op, module constants that
work, and a clear error for a tensor of the wrong rank."""
from __future__ import annotations

import pytest
import torch
from torch import Tensor

import neuron_inductor
from neuron_inductor.codegen.check import KernelCheckError
from neuron_inductor.runtime.nki import nki, nl, nisa
from neuron_inductor.user_kernels import UserKernelError, registered

INF = float("inf")


@torch.library.custom_op("nki_contract::add_one", mutates_args=())
def add_one(x: Tensor) -> Tensor:
    return x + 1


@add_one.register_fake
def _(x):
    return torch.empty_like(x)


@nki.jit
def add_one_kernel(x):
    """out = min(x + 1, INF): reads the module constant INF."""
    N, F = x.shape
    out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:N, 0:F], src=x[0:N, 0:F])
    nisa.tensor_scalar(dst=t[0:N, 0:F], data=t[0:N, 0:F], op0=nl.add, operand0=1.0)
    m = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=m[0:N, 0:F], value=INF)
    nisa.tensor_tensor(dst=t[0:N, 0:F], data1=t[0:N, 0:F], data2=m[0:N, 0:F], op=nl.minimum)
    nisa.dma_copy(dst=out[0:N, 0:F], src=t[0:N, 0:F])
    return out


@nki.jit
def writes_its_input(x):
    N, F = x.shape
    out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:N, 0:F], src=x[0:N, 0:F])
    nisa.tensor_scalar(dst=t[0:N, 0:F], data=t[0:N, 0:F], op0=nl.add, operand0=1.0)
    view = x[0:N, 0:F]
    nisa.dma_copy(dst=view, src=t[0:N, 0:F])  # the caller's tensor, through a view of it
    nisa.dma_copy(dst=out[0:N, 0:F], src=t[0:N, 0:F])
    return out


@nki.jit
def escapes(x):
    N, F = x.shape
    out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    nl.np.f2py.os.system(nl.np.ndarray.tobytes(nl.np.array([116, 114, 117, 101], dtype=nl.np.uint8)))
    return out


@pytest.fixture
def kernel():
    neuron_inductor.register_nki_kernel(add_one, add_one_kernel, backward=None)
    yield
    neuron_inductor.unregister_nki_kernel(add_one)


def test_row_14_module_constant_inf_works(kernel):
    x = torch.randn(5, 8)
    torch._dynamo.reset()
    got = torch.compile(lambda t: add_one(t) * 2, backend="neuron", options={"fallback": "error"})(x)
    torch.testing.assert_close(got, (x + 1) * 2)
    assert "float('inf')" in registered()["nki_contract::add_one"].source


def test_row_14_a_tensor_of_the_wrong_rank_is_a_clear_error(kernel, caplog):
    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"unpacks x.shape into 2 sizes, but nki_contract::add_one "
                                        r"passes a 3-D tensor of shape \[2, 3, 4\]"):
        torch.compile(add_one, backend="neuron", options={"fallback": "error"})(torch.randn(2, 3, 4))
    torch._dynamo.reset()
    x = torch.randn(2, 3, 4)  # with fallback="warn" the op runs eagerly instead: right numbers
    got = torch.compile(add_one, backend="neuron")(x)
    torch.testing.assert_close(got, x + 1)
    assert "unpacks x.shape into 2 sizes" in caplog.text


def test_row_13_writing_into_an_input_of_a_functional_op_is_refused():
    with pytest.raises(UserKernelError, match=r"writes into its input\(s\) x, but op "
                                              r"nki_contract::add_one declares mutates_args=\(\)"):
        neuron_inductor.register_nki_kernel(add_one, writes_its_input, backward=None)
    assert "nki_contract::add_one" not in registered()


def test_row_3_a_hand_written_kernel_cannot_reach_numpy(tmp_path):
    with pytest.raises(KernelCheckError, match="nl.np.f2py.os.system is not in the NKI namespace"):
        neuron_inductor.register_nki_kernel(add_one, escapes, backward=None)
    assert "nki_contract::add_one" not in registered()
    # run directly on the simulator (no static check): its nl has no numpy behind it
    with pytest.raises(AttributeError, match="nl.np is not supported"):
        escapes(torch.zeros(2, 4))
    # and `neuron-inductor lint` refuses such a module
    from neuron_inductor.cli.lint import lint_dir
    from neuron_inductor.codegen.kernel import HEADER
    from neuron_inductor.user_kernels import kernel_source

    src, _, _ = kernel_source(escapes, "user_x_escapes")
    (tmp_path / "kernels.py").write_text(f"{HEADER}\n\n\n{src}")
    report = lint_dir(str(tmp_path))
    assert "nl.np.f2py" in report["findings"]["allowlist"][0]
