"""The kernel allowlist accepts what codegen emits and refuses host compute or anything unlisted."""
from __future__ import annotations

import pytest

from neuron_inductor.codegen.check import KernelCheckError, check_kernel_source
from neuron_inductor.codegen.kernel import HEADER

GOOD_BODY = """
    out0 = nl.ndarray((4096,), dtype=nl.float32, buffer=nl.shared_hbm)
    for i0 in nl.affine_range(3):
        n = min(128, 300 - 128 * i0)
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t[0:n, 0:512], src=in0.ap(pattern=[[512, n], [1, 512]], offset=i0 * 65536 // 2 % 7))
        nisa.memset(dst=t[0:n, 0:512], value=-float('inf'), engine=nisa.gpsimd_engine)
        nisa.nc_matmul(dst=t[0:n, 0:512], stationary=t[0:n, 0:n], moving=t[0:n, 0:512], accumulate=i0 > 0)
    return out0
"""


def module(body: str, header: str = HEADER) -> str:
    return f'"""doc"""\n{header}\n\n\n@nki.jit\ndef k0(in0):\n    """kernel doc"""{body}'


def test_accepts_generated_style():
    check_kernel_source(module(GOOD_BODY))


@pytest.mark.parametrize("line, why", [
    ("nisa.activation(dst=t, op=np.exp, data=t)", "attribute access"),
    ("x = np.exp(3)", "may be called"),
    ("x = torch.exp(t)", "torch"),
    ("x = torch.ops.aten.add(t, t)", "torch"),
    ("x = numpy.zeros(3)", "numpy"),
    ("x = t.shape", "attribute access"),
    ("x = 3 / 2", "int arithmetic"),
    ("x = 3 ** 2", "int arithmetic"),
    ("x = 1.5 * 2", "float arithmetic"),
    ("x = float('3.5')", "float("),
    ("x = abs(-3)", "not allowed"),
    ("x = open('/etc/passwd')", "not allowed"),
    ("x = __import__('os')", "not allowed"),
    ("x = nl.__class__", "allowlist"),
    # issue 25 row 3: the allowlist is per name, not "anything without a leading underscore"
    ("nl.np.f2py.os.system(nl.np.ndarray.tobytes(nl.np.array([1], dtype=nl.np.uint8)))", "nl.np.f2py"),
    ("x = nl.np", "allowlist"),
    ("x = nisa.np.zeros(3)", "allowlist"),
    ("x = nl.tile_size.pmax.bit_length()", "allowlist"),
    ("x = nl.add.fn", "allowlist"),
    ("x = nl", "only be used as nl.<name>"),
    ("nl = 3", "only be used as nl.<name>"),
    ("nisa.activation(dst=t, op=nki, data=t)", "only be used as nki.<name>"),
    ("x = [i for i in range(3)]", "ListComp"),
    ("x = lambda: 0", "Lambda"),
    ("x = 'text'", "string constants"),
    ("if 1:\n        pass", "If"),
    ("while 0:\n        pass", "While"),
    ("import os", "Import"),
    ("x = nisa.dma_copy(*t)", "star"),
    ("for j in [1, 2]:\n        pass", "nl.affine_range"),
    ("x = 1 < 2 < 3", "single int comparisons"),
])
def test_rejects(line: str, why: str):
    with pytest.raises(KernelCheckError, match=why.replace("(", r"\(")) as info:
        check_kernel_source(module(f"\n    {line}\n    return None\n"))
    assert "line " in str(info.value)


def test_rejects_extra_import_and_module_code():
    with pytest.raises(KernelCheckError, match="header import"):
        check_kernel_source(module(GOOD_BODY) + "\nimport numpy as np\n")
    with pytest.raises(KernelCheckError, match="module level"):
        check_kernel_source(module(GOOD_BODY) + "\nX = torch.ones(3)\n")
    with pytest.raises(KernelCheckError, match="lacks the header"):
        check_kernel_source(module(GOOD_BODY, header=""))
    with pytest.raises(KernelCheckError, match="header import"):
        check_kernel_source(module(GOOD_BODY, header="import torch"))


def test_rejects_undecorated_function_and_syntax_error():
    src = module(GOOD_BODY) + "\n\ndef helper():\n    return 1\n"
    with pytest.raises(KernelCheckError, match="nki.jit"):
        check_kernel_source(src)
    with pytest.raises(KernelCheckError, match="does not parse"):
        check_kernel_source("def (")
