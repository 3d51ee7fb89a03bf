"""The device path, exercised with a stand-in ``nki`` package that enforces the documented NKI 0.3+
call contract (``nki.jit`` on a plain function; torch tensors on the XLA device, no 64-bit dtypes,
at least one argument for framework detection; ``kernel[lnc]`` equal to NEURON_LOGICAL_NC_CONFIG;
NEURON_PLATFORM_TARGET_OVERRIDE set to a known target) and computes with our simulator."""
from __future__ import annotations

import importlib.machinery
import os
import sys
import types

import numpy as np
import pytest
import torch

from neuron_inductor import autoselect, config
from neuron_inductor.runtime import device as dev
from neuron_inductor.runtime import nki as selector
from neuron_inductor.runtime import sim

TARGETS = {"trn1", "inf2", "gen2", "trn2", "gen3", "trn3", "gen4"}
XLA = torch.device("cpu")  # the stand-in XLA device


class ContractViolation(AssertionError):
    pass


class StandInKernel:
    def __init__(self, fn):
        if not isinstance(fn, types.FunctionType):
            raise ContractViolation(f"nki.jit wraps a plain function, got {type(fn).__name__}")
        self.fn = fn
        self.launches = []

    def __getitem__(self, lnc):
        if lnc not in (1, 2) or lnc != int(os.environ.get("NEURON_LOGICAL_NC_CONFIG", "1")):
            raise ContractViolation(f"kernel[{lnc}] must equal NEURON_LOGICAL_NC_CONFIG")
        return lambda *args: self._launch(lnc, args)

    def __call__(self, *args):
        return self[1](*args)

    def _launch(self, lnc, args):
        if os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE") not in TARGETS:
            raise ContractViolation("NEURON_PLATFORM_TARGET_OVERRIDE must name the target")
        if not args:
            raise ContractViolation("no argument: the framework cannot be detected")
        for a in args:
            if not isinstance(a, torch.Tensor) or a.device != XLA:
                raise ContractViolation("arguments are torch tensors on the XLA device")
            if a.dtype in (torch.int64, torch.float64):
                raise ContractViolation(f"{a.dtype} has no NKI dtype")
        self.launches.append((lnc, os.environ["NEURON_PLATFORM_TARGET_OVERRIDE"]))
        return sim.jit(self.fn)(*args)


def _standin_nki() -> types.ModuleType:
    m = types.ModuleType("nki")
    m.__spec__ = importlib.machinery.ModuleSpec("nki", None)
    m.kernels = []

    def jit(fn=None, **kw):
        if kw:
            raise ContractViolation(f"nki.jit options {sorted(kw)} are not part of the 0.3 contract")
        k = StandInKernel(fn)
        m.kernels.append(k)
        return k

    m.jit = jit
    return m


@pytest.fixture
def device_host(monkeypatch):
    """A Trainium host with the stand-in toolchain and torch_xla."""
    fake = _standin_nki()
    xla = types.ModuleType("torch_xla")
    core = types.ModuleType("torch_xla.core")
    xm = types.ModuleType("torch_xla.core.xla_model")
    xm.xla_device = lambda: XLA
    for name, mod in {"nki": fake, "nki.language": sim.nl, "nki.isa": sim.nisa, "torch_xla": xla,
                      "torch_xla.core": core, "torch_xla.core.xla_model": xm}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setenv("NEURON_INDUCTOR_HOST", "trn2")
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "")
    monkeypatch.delenv("NEURON_LOGICAL_NC_CONFIG", raising=False)
    autoselect.reset_detection()
    yield fake
    autoselect.reset_detection()


SRC = '''from neuron_inductor.runtime.nki import nki, nl, nisa
PLATFORM_TARGET = "{target}"


@nki.jit
def k_scale(in0, in1):
    out0 = nl.ndarray((128,), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((16, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=in0.ap(pattern=[[8, 16], [1, 8]], offset=0))
    nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=2.0)
    nisa.dma_copy(dst=out0.ap(pattern=[[8, 16], [1, 8]], offset=0), src=t)
    nisa.dma_copy(dst=in1.ap(pattern=[[8, 16], [1, 8]], offset=0), src=t)
    return out0, in1


@nki.jit
def k_iota():
    out0 = nl.ndarray((8,), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((1, 8), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(dst=t, pattern=[[1, 8]], offset=0)
    nisa.dma_copy(dst=out0.ap(pattern=[[8, 1], [1, 8]], offset=0), src=t)
    return out0
'''


def _load(target: str) -> dict:
    ns: dict = {}
    exec(compile(SRC.format(target=target), f"<kernels_{target}>", "exec"), ns)  # noqa: S102
    return ns


def test_device_is_selected_and_kernels_follow_the_contract(device_host, monkeypatch):
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    with config.patch(runtime="device"):
        assert selector.explain()["mode"] == "device"
        ns = _load("trn2")
    x, y = torch.arange(128, dtype=torch.float32), torch.zeros(128)
    out, y_back = ns["k_scale"](x, y)
    torch.testing.assert_close(out, x * 2)
    assert y_back is y and torch.equal(y, x * 2)  # the mutated parameter reached the caller
    assert device_host.kernels[0].launches == [(1, "trn2")]
    np.testing.assert_array_equal(ns["k_iota"]().numpy(), np.arange(8))  # a kernel without arguments


def test_trn2_default_lnc2_is_refused_with_the_fix(device_host):
    with config.patch(runtime="device"):
        ns = _load("trn2")
    with pytest.raises(dev.DeviceContractError, match="NEURON_LOGICAL_NC_CONFIG=1"):
        ns["k_scale"](torch.zeros(128), torch.zeros(128))


def test_trn1_kernels_launch_with_lnc1_by_default(device_host):
    with config.patch(runtime="device"):
        ns = _load("trn1")
    ns["k_scale"](torch.ones(128), torch.zeros(128))
    assert device_host.kernels[0].launches == [(1, "trn1")]


def test_target_mismatch_and_int64_are_refused(device_host, monkeypatch):
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    with config.patch(runtime="device"):
        ns = _load("trn2")
    with pytest.raises(dev.DeviceContractError, match="64-bit"):
        ns["k_scale"](torch.zeros(128, dtype=torch.int64), torch.zeros(128))
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn1")
    with pytest.raises(dev.DeviceContractError, match="compiled for trn2"):
        ns["k_scale"](torch.zeros(128), torch.zeros(128))


def test_classic_neuronxcc_is_not_a_toolchain(monkeypatch):
    classic = types.ModuleType("neuronxcc")
    classic.__spec__ = importlib.machinery.ModuleSpec("neuronxcc", None)
    monkeypatch.setitem(sys.modules, "neuronxcc", classic)
    monkeypatch.setattr(selector, "_importable", lambda name: name == selector.CLASSIC)
    monkeypatch.setenv("NEURON_INDUCTOR_HOST", "trn2")
    autoselect.reset_detection()
    try:
        assert selector._find_real() is None
        with config.patch(runtime="device"), pytest.raises(RuntimeError, match="classic neuronxcc.nki"):
            selector.select()
        with config.patch(runtime="auto"):
            assert selector.explain()["mode"] == "simulator"
    finally:
        autoselect.reset_detection()


def test_compiled_function_runs_through_the_device_path(device_host, monkeypatch):
    monkeypatch.setenv("NEURON_LOGICAL_NC_CONFIG", "1")
    x = torch.randn(40, 24)
    with config.patch(runtime="device", fallback="error"):
        out = torch.compile(lambda a: a * 2.0 + 1.0, backend="neuron")(x)
    torch.testing.assert_close(out, x * 2.0 + 1.0)
    assert device_host.kernels and all(k.launches for k in device_host.kernels)
    assert {t for k in device_host.kernels for _, t in k.launches} == {config.get_config().target}
