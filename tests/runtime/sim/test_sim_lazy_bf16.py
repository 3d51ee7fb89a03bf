"""ml_dtypes (0.3-1.3 s to import) is loaded on first use of bf16, and bf16 still works either way.

Each case runs in a fresh interpreter: this test process has long imported ml_dtypes.
"""
import subprocess
import sys
import textwrap

KERNEL = textwrap.dedent("""
    import sys
    import numpy as np
    import torch
    from neuron_inductor.runtime.sim import nki, nl, nisa

    def make(dtype_name):
        @nki.jit
        def double(x):
            dtype = getattr(nl, dtype_name)
            out = nl.ndarray((8,), dtype=dtype, buffer=nl.shared_hbm)
            t = nl.ndarray((1, 8), dtype=dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=x.ap(pattern=[[8, 1], [1, 8]], offset=0))
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
            nisa.dma_copy(dst=out.ap(pattern=[[8, 1], [1, 8]], offset=0), src=t)
            return out
        return double
""")


def run(body: str) -> str:
    p = subprocess.run([sys.executable, "-c", KERNEL + textwrap.dedent(body)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_fp32_kernels_never_import_ml_dtypes_and_bf16_loads_on_demand():
    out = run("""
        x = torch.arange(8.0)
        assert torch.equal(make("float32")(x), x * 2)
        print("fp32", "ml_dtypes" in sys.modules)
        xb = torch.arange(8.0, dtype=torch.bfloat16)
        yb = make("bfloat16")(xb)
        assert yb.dtype == torch.bfloat16 and torch.equal(yb, xb * 2)
        print("bf16", "ml_dtypes" in sys.modules)
    """)
    assert out.split() == ["fp32", "False", "bf16", "True"]


def test_bf16_numpy_array_from_a_later_ml_dtypes_import_is_accepted():
    out = run("""
        import ml_dtypes
        x = np.arange(8, dtype=np.float32).astype(ml_dtypes.bfloat16)
        y = make("bfloat16")(x)
        assert y.dtype == ml_dtypes.bfloat16
        np.testing.assert_array_equal(y.astype(np.float32), np.arange(8) * 2.0)
        print("ok")
    """)
    assert out.split() == ["ok"]


def test_unsupported_dtype_message_still_lists_bfloat16():
    out = run("""
        from neuron_inductor.runtime.sim import SimulatorError
        @nki.jit
        def bad():
            return nl.ndarray((8,), dtype=np.float64, buffer=nl.shared_hbm)
        try:
            bad()
        except SimulatorError as e:
            print("bfloat16" in str(e), "ml_dtypes" in sys.modules)
    """)
    assert out.split() == ["True", "False"]
