"""neuron_inductor.runtime.nki: the device only when its runtime is usable, never silently for 'device'."""
from __future__ import annotations

import pytest

from neuron_inductor import config
from neuron_inductor.runtime import nki as selector
from neuron_inductor.runtime import sim


@pytest.fixture
def host(monkeypatch):
    """Pretend the host has (or lacks) a device and a toolchain."""
    def set_host(device: bool, toolchain: bool) -> None:
        monkeypatch.setattr(selector, "device_present", lambda: device)
        monkeypatch.setattr(selector, "toolchain_problems",
                            lambda: () if toolchain else ("an NKI 0.3+ toolchain (`import nki`: not installed)",))
        selector.reset_probe()
    yield set_host
    selector.reset_probe()


def test_this_machine_gets_the_simulator():
    from neuron_inductor.runtime.nki import nki, nl, nisa

    assert (nki, nl, nisa) == (sim.nki, sim.nl, sim.nisa)


@pytest.mark.parametrize("device,toolchain,expected", [
    (False, False, "simulator"), (True, False, "simulator"), (False, True, "simulator"),
    (True, True, "device")])
def test_auto(host, device, toolchain, expected):
    host(device, toolchain)
    with config.patch(runtime="auto"):
        assert selector.backend() == expected


def test_simulator_forced_even_on_a_device_host(host):
    host(True, True)
    with config.patch(runtime="simulator"):
        assert selector.backend() == "simulator"
        assert selector.nki is sim.nki  # module __getattr__ reads the config at import time


@pytest.mark.parametrize("device,toolchain,missing", [
    (False, True, "Trainium host"), (True, False, "toolchain"), (False, False, "Trainium host")])
def test_device_without_hardware_is_a_clear_error(host, device, toolchain, missing):
    host(device, toolchain)
    with config.patch(runtime="device"), pytest.raises(RuntimeError, match=missing):
        selector.select()


def test_device_selected_loads_the_real_modules(host, monkeypatch):
    host(True, True)
    loaded = []
    monkeypatch.setattr(selector, "_load_real", lambda: loaded.append(1) or ("n", "l", "i"))
    with config.patch(runtime="device"):
        assert selector.select() == ("n", "l", "i")
    assert loaded == [1]
