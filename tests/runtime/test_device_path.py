"""The device path on TorchNeuron, against stand-ins that enforce the documented contract.

No Trainium exists here. ``tests/runtime/neuron_standin/`` holds a stand-in ``torch_neuronx`` (a real
PrivateUse1 ``neuron`` device whose memory is host memory, counting every host<->device copy) and a
stand-in ``nki`` (``nki.jit`` refusing anything but ``neuron`` tensors, compiling per signature,
running kernels with our simulator on the device tensors' bytes). The PrivateUse1 name can be
registered once per process, so those scenarios run in one fresh interpreter
(``neuron_standin/scenarios.py``); the runtime-selection tests below fake a TorchNeuron host in
process (no device, broken ``nki``).
"""
from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from neuron_inductor import autoselect, config, stats
from neuron_inductor.runtime import device as dev
from neuron_inductor.runtime import nki as selector
from neuron_inductor.runtime import sim

STANDIN = Path(__file__).parent / "neuron_standin"
ROOT = Path(__file__).parents[2]


# ------------------------------------------------------------------ scenarios on the stand-in device

@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    cache = tmp_path_factory.mktemp("device-cache")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_INDUCTOR_", "_NEURON"))}
    env.update(PYTHONPATH=os.pathsep.join([str(STANDIN), str(ROOT)]), NEURON_INDUCTOR_HOST="trn2",
               NEURON_LOGICAL_NC_CONFIG="1", NEURON_INDUCTOR_CACHE_DIR=str(cache),
               TORCH_DEVICE_BACKEND_AUTOLOAD="0", HF_HUB_OFFLINE="1")
    names = ["runtime_probe", "llama_train", "cpu_inputs", "contract_refusals", "nki_op_in_graph",
             "wrap_nki_in_graph", "inplace_update"]
    res = subprocess.run([sys.executable, str(STANDIN / "scenarios.py"), *names], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=900)
    out = {}
    for line in res.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            out[r["name"]] = r
    assert set(out) == set(names), (res.stdout[-3000:], res.stderr[-3000:])
    return out


def _value(scenarios, name):
    r = scenarios[name]
    assert r["ok"], r.get("error")
    return r["value"]


def test_auto_picks_the_device_on_a_torchneuron_host(scenarios):
    assert _value(scenarios, "runtime_probe")["mode"] == "device"


def test_tiny_llama_training_steps_on_the_device_match_eager_with_no_host_copies(scenarios):
    v = _value(scenarios, "llama_train")
    for step in v["steps"]:
        assert step["copies_in_graphs"] == {"host_to_device": 0, "device_to_host": 0}
        assert step["copies_in_optimizer"] == {"host_to_device": 0, "device_to_host": 0}
        assert step["host_calls"] == {"fallbacks": {}, "collectives": {}, "boundary_copies": {}}
        assert step["loss_device"] == "neuron:0" and step["grad_devices"] == ["neuron:0"]
        assert abs(step["loss"] - step["loss_ref"]) < 1e-5 * max(1.0, abs(step["loss_ref"]))
        assert step["grad_err"] < 1e-4  # max |grad - eager grad| relative to the largest eager grad
    assert v["steps"][0]["new_kernel_compiles"] > 0
    assert v["steps"][1]["new_kernel_compiles"] == 0  # compiled per signature on the first call only
    assert v["params_err"] < 1e-5  # after two AdamW steps on the device
    assert v["kernels_launched"] > 0


def test_input_mutations_land_in_the_callers_device_tensor(scenarios):
    v = _value(scenarios, "inplace_update")
    assert v["copies"] == {"host_to_device": 0, "device_to_host": 0}
    assert v["buf_device"] == "neuron:0" and v["err"] < 1e-6 and v["out_err"] < 1e-3


def test_cpu_inputs_follow_torchneuron_convention(scenarios):
    v = _value(scenarios, "cpu_inputs")
    assert v["ok"] and v["device"] == "neuron:0"
    assert v["boundary"] == {"input": 2} and v["copies"] == {"host_to_device": 2, "device_to_host": 0}
    assert "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1" in v["refused"]
    assert "requires grad" in v["grad_refused"] and "model.to('neuron')" in v["grad_refused"]


def test_a_kernel_or_fallback_handed_a_host_tensor_fails(scenarios):
    v = _value(scenarios, "contract_refusals")
    assert "not on the neuron device" in v["kernel"]
    assert "kernels take tensors on the neuron device" in v["standin_kernel"]
    # with the graph boundary sabotaged, host tensors reach the graph: a kernel refuses them, and a
    # declared fallback that computed on the host is caught at the graph's outputs
    assert v["graph_kernel"].startswith("DeviceContractError") and "argument 0 is on cpu" in v["graph_kernel"]
    assert v["graph_fallback"].startswith("DeviceContractError") and "ran on the host" in v["graph_fallback"]
    fb = v["fallback_on_device"]  # a declared fallback runs as an ATen op on the device
    assert fb["fallbacks"] == {"aten.bucketize.Tensor": 1} and fb["device"] == "neuron:0" and fb["ok"]
    assert fb["copies"] == {"host_to_device": 0, "device_to_host": 0}


@pytest.mark.parametrize("how", ["nki_op_in_graph", "wrap_nki_in_graph"])
def test_torchneuron_nki_kernels_compile_in_the_graph_forward_and_backward(scenarios, how):
    v = _value(scenarios, how)
    assert v["frames"] == 1  # one Dynamo graph: no graph break at the op
    assert v["fallback_ops"] == {}  # fallback="error" was in force as well
    assert v["user_kernel_calls"] == 3  # the forward's launch and the backward's two
    assert max(v["errs"]) < 1e-5  # output and both input gradients against eager on the device


# ------------------------------------------------------------------ the call contract, in process

SRC = '''from neuron_inductor.runtime.nki import nki, nl, nisa
PLATFORM_TARGET = "{target}"


@nki.jit
def k_scale(in0, in1):
    out0 = nl.ndarray((128,), dtype=nl.float32, buffer=nl.shared_hbm)
    return out0, in1
'''


class _NeverLaunched:
    def jit(self, fn, **kw):
        return self

    def __getitem__(self, lnc):
        raise AssertionError("launched despite a refused call")


def _kernel(target: str, tmp_path) -> dev.DeviceKernel:
    path = tmp_path / f"kernels_{target}.py"
    path.write_text(SRC.format(target=target).replace("@nki.jit\n", ""))
    ns: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), ns)  # noqa: S102
    return dev.DeviceKernel(_NeverLaunched(), ns["k_scale"], {})


def test_default_lnc2_of_trn2_is_refused_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.delenv(dev.LNC_ENV, raising=False)
    monkeypatch.setenv(dev.TARGET_ENV, "")
    with pytest.raises(dev.DeviceContractError, match="NEURON_LOGICAL_NC_CONFIG=1"):
        _kernel("trn2", tmp_path)(torch.zeros(128), torch.zeros(128))


def test_target_mismatch_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(dev.LNC_ENV, "1")
    monkeypatch.setenv(dev.TARGET_ENV, "trn1")
    with pytest.raises(dev.DeviceContractError, match="compiled for trn2"):
        _kernel("trn2", tmp_path)(torch.zeros(128), torch.zeros(128))


def test_returned_parameters_are_read_from_the_kernel(tmp_path):
    assert _kernel("trn2", tmp_path).returned_params == {1: 1}


def test_the_retired_xla_route_is_gone():
    retired = "torch" + "_xla"  # spelled apart so this file does not name it
    for base in (ROOT / "neuron_inductor", ROOT / "tests"):
        for f in base.rglob("*.py"):
            assert retired not in f.read_text(encoding="utf-8"), f


# ------------------------------------------------------------------ runtime="auto" on broken hosts

def _module(name: str, **attrs) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__spec__ = importlib.machinery.ModuleSpec(name, None)
    m.__dict__.update(attrs)
    return m


@pytest.fixture
def torchneuron_host(monkeypatch):
    """A trn2 host with TorchNeuron installed; each test says what works of its device runtime."""
    monkeypatch.setenv("NEURON_INDUCTOR_HOST", "trn2")
    monkeypatch.setitem(sys.modules, "torch_neuronx", _module("torch_neuronx"))
    autoselect.reset_detection()
    selector.reset_probe()

    def set_host(device: bool, nki_works: bool) -> None:
        neuron = _module("torch.neuron", is_available=lambda: device, device_count=lambda: int(device))
        monkeypatch.setattr(torch, "neuron", neuron, raising=False)
        monkeypatch.setitem(sys.modules, "nki", _module("nki", jit=lambda fn, **kw: fn))
        monkeypatch.setitem(sys.modules, "nki.isa", sim.nisa)
        # a broken install: the package is there, its language module fails to import
        monkeypatch.setitem(sys.modules, "nki.language", sim.nl if nki_works else None)
        selector.reset_probe()
    yield set_host
    autoselect.reset_detection()
    selector.reset_probe()


@pytest.mark.parametrize("device,nki_works,missing", [
    (False, True, "torch.neuron.is_available() is False"),
    (True, False, "`import nki` failed: ModuleNotFoundError"),
])
def test_auto_on_a_host_whose_device_runtime_cannot_run(torchneuron_host, device, nki_works, missing,
                                                        tmp_path, capsys):
    from neuron_inductor.cli.doctor import doctor_report

    f = lambda a: torch.tanh(a) * 3.0  # noqa: E731
    x = torch.randn(8, 40)
    with config.patch(runtime="simulator"):  # a good cache entry, compiled before
        torch.testing.assert_close(torch.compile(f, backend="neuron_inductor")(x), f(x))
    torch._dynamo.reset()
    from neuron_inductor.cache import clear_memory
    clear_memory()
    torchneuron_host(device, nki_works)
    stats.reset("cache")
    with config.patch(runtime="auto"):
        e = selector.explain()
        assert e["mode"] == "simulator" and missing in e["reason"], e
        torch.testing.assert_close(torch.compile(f, backend="neuron_inductor")(x), f(x))
        rep = doctor_report()
    assert rep["runtime"]["mode"] == "simulator" and missing in rep["runtime"]["reason"]
    assert stats.cache().get("quarantined", 0) == 0 and stats.cache().get("hits", 0) >= 1
    qdir = Path(os.environ["NEURON_INDUCTOR_CACHE_DIR"]) / "quarantine"
    assert not qdir.exists() or not any(qdir.iterdir())


def test_explicit_device_without_a_usable_runtime_is_a_configuration_error(torchneuron_host):
    f = lambda a: torch.exp(a) + 1.0  # noqa: E731
    x = torch.randn(8, 40)
    with config.patch(runtime="simulator"):
        torch.compile(f, backend="neuron_inductor")(x)
    torch._dynamo.reset()
    from neuron_inductor.cache import clear_memory
    clear_memory()
    torchneuron_host(True, False)
    stats.reset("cache")
    with config.patch(runtime="device"), pytest.raises(Exception) as info:
        torch.compile(f, backend="neuron_inductor")(x)
    text = str(info.value)
    assert "runtime='device' needs a working NKI toolchain" in text and "internal error" not in text
    assert stats.cache().get("quarantined", 0) == 0
    qdir = Path(os.environ["NEURON_INDUCTOR_CACHE_DIR"]) / "quarantine"
    assert not qdir.exists() or not any(qdir.iterdir())


def test_classic_neuronxcc_is_not_a_toolchain(monkeypatch):
    monkeypatch.setattr(selector, "_importable", lambda name: name == selector.CLASSIC)
    assert "classic neuronxcc.nki" in selector._nki_problem()


def test_off_trainium_nothing_is_imported(monkeypatch):
    monkeypatch.setenv("NEURON_INDUCTOR_HOST", "none")
    autoselect.reset_detection()
    selector.reset_probe()
    monkeypatch.setattr(selector, "toolchain_problems", lambda: pytest.fail("probed off Trainium"))
    try:
        with config.patch(runtime="auto"):
            assert selector.explain()["mode"] == "simulator"
    finally:
        autoselect.reset_detection()
        selector.reset_probe()
