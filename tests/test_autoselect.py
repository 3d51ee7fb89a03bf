"""Auto-selection: host detection on fake sysfs/dev trees, the post-import hooks, and end to end in a
fresh interpreter that imports only torch (and transformers): no import of ours in user code."""
from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import types
import warnings

import pytest

from neuron_inductor import _autoload, autoselect


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv(autoselect.HOST_ENV, raising=False)
    monkeypatch.delenv(autoselect._ROOT_ENV, raising=False)
    monkeypatch.setattr(autoselect, "_hooks", autoselect._PostImportHooks())
    monkeypatch.setattr(autoselect, "errors", [])
    monkeypatch.setattr(autoselect, "_installed", False)
    monkeypatch.setattr(autoselect, "_warned_conflict", False)
    monkeypatch.setattr(autoselect, "_want_default", False)
    monkeypatch.delenv("NEURON_INDUCTOR_NEURON_BACKEND", raising=False)
    autoselect.reset_detection()
    autoselect.backend_name.cache_clear()
    autoselect.neuron_name_rule.cache_clear()
    yield
    autoselect.reset_detection()
    autoselect.backend_name.cache_clear()
    autoselect.neuron_name_rule.cache_clear()


def _pci(root, name: str, vendor: int, device: int) -> None:
    d = root / "sys" / "bus" / "pci" / "devices" / name
    d.mkdir(parents=True)
    (d / "vendor").write_text(f"{vendor:#06x}\n")
    (d / "device").write_text(f"{device:#06x}\n")


@pytest.fixture
def sysroot(tmp_path, monkeypatch):
    monkeypatch.setenv(autoselect._ROOT_ENV, str(tmp_path))
    (tmp_path / "dev").mkdir()
    _pci(tmp_path, "0000:00:00.0", 0x8086, 0x1237)  # an ordinary host bridge
    return tmp_path


def test_plain_host_is_not_trainium(sysroot):
    det = autoselect.detect()
    assert det.kind is None and det.source == "none"
    assert autoselect.host_kind() is None


@pytest.mark.parametrize("device,kind", [(0x7164, "trn1"), (0x7364, "trn2")])
def test_pci_ids_name_the_generation(sysroot, device, kind):
    _pci(sysroot, "0000:10:1c.0", 0x1D0F, device)
    det = autoselect.detect()
    assert (det.kind, det.source) == (kind, "pci")
    assert f"{device:#06x}" in det.evidence[0]


@pytest.mark.parametrize("device", [0xEC20, 0x7264])  # Amazon's ENA NIC; Inferentia2
def test_other_amazon_pci_devices_are_not_trainium(sysroot, device):
    _pci(sysroot, "0000:00:05.0", 0x1D0F, device)
    assert autoselect.detect().kind is None


def test_dev_node_must_be_a_char_device(sysroot):
    (sysroot / "dev" / "neuron0").write_text("")  # a regular file is not a device
    assert autoselect.detect().kind is None
    (sysroot / "dev" / "neuron0").unlink()
    os.symlink("/dev/null", sysroot / "dev" / "neuron0")  # a real character device
    det = autoselect.detect()
    assert (det.kind, det.source) == ("trn2", "dev")  # unknown generation: newest known
    assert "/dev/neuron0" in det.evidence


@pytest.mark.parametrize("instance,kind", [("trn1.32xlarge", "trn1"), ("trn2.48xlarge", "trn2"),
                                           ("trn3.48xlarge", "trn3"), ("inf2.xlarge", None)])
def test_sysfs_instance_type(sysroot, instance, kind):
    arch = sysroot / "sys" / "devices" / "virtual" / "neuron_device" / "neuron0" / "info" / "architecture"
    arch.mkdir(parents=True)
    (arch / "instance_type").write_text(instance + "\n")
    det = autoselect.detect()
    assert (det.kind, det.source) == (kind, "sysfs")


def test_env_declares_the_host_over_detection(sysroot, monkeypatch):
    _pci(sysroot, "0000:10:1c.0", 0x1D0F, 0x7364)
    monkeypatch.setenv(autoselect.HOST_ENV, "none")
    assert autoselect.detect() == autoselect.Detection(None, "env", ("NEURON_INDUCTOR_HOST=none",))
    monkeypatch.setenv(autoselect.HOST_ENV, "TRN1")
    assert autoselect.detect().kind == "trn1"
    monkeypatch.setenv(autoselect.HOST_ENV, "trn3")  # no Trainium3 PCI id is documented: declared
    assert autoselect.detect().kind == "trn3"
    monkeypatch.setenv(autoselect.HOST_ENV, "gpu")  # nonsense declares "not a Trainium"
    assert autoselect.detect().kind is None


def test_install_default_does_nothing_off_trainium(monkeypatch):
    monkeypatch.setenv(autoselect.HOST_ENV, "none")
    assert autoselect.install_default() is False
    assert autoselect._hooks not in sys.meta_path and not autoselect._hooks.hooks


def test_post_import_hook_runs_once_and_never_raises(tmp_path, monkeypatch):
    for name in ("ni_fake_a", "ni_fake_b"):
        (tmp_path / f"{name}.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def bump(module):
        module.VALUE += 1
        seen.append(module.__name__)

    def broken(module):
        raise ValueError("boom")

    autoselect._when_imported("ni_fake_a", bump)
    autoselect._when_imported("ni_fake_b", broken)
    assert autoselect._hooks in sys.meta_path
    try:
        import ni_fake_a
        assert ni_fake_a.VALUE == 42 and seen == ["ni_fake_a"]
        import ni_fake_b  # the hook fails: recorded, the import still succeeds
        assert ni_fake_b.VALUE == 41
        assert autoselect.errors == ["broken: ValueError: boom"]
        assert autoselect._hooks not in sys.meta_path  # nothing left to watch
        autoselect._when_imported("ni_fake_a", bump)  # already imported: applied at once
        assert ni_fake_a.VALUE == 43 and autoselect._hooks not in sys.meta_path
    finally:
        autoselect._hooks.remove()
        sys.modules.pop("ni_fake_a", None)
        sys.modules.pop("ni_fake_b", None)


def test_hook_for_a_module_that_imports_us_halfway(tmp_path, monkeypatch):
    """transformers' training_args imports torch (so our autoload) before defining its classes."""
    (tmp_path / "ni_fake_outer.py").write_text("import ni_fake_inner\nVALUE = 41\n")
    (tmp_path / "ni_fake_inner.py").write_text(
        "from neuron_inductor import autoselect\n"
        "def bump(m):\n    m.VALUE += 1\n"
        "autoselect._when_imported('ni_fake_outer', bump)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        import ni_fake_outer
        assert ni_fake_outer.VALUE == 42, autoselect.errors
        assert type(ni_fake_outer.__spec__) is importlib.machinery.ModuleSpec  # class given back
        assert autoselect.errors == []
    finally:
        sys.modules.pop("ni_fake_outer", None)
        sys.modules.pop("ni_fake_inner", None)


def _fake_training_args() -> types.ModuleType:
    @dataclasses.dataclass
    class TrainingArguments:
        torch_compile: bool = False
        torch_compile_backend: str | None = None

        def __post_init__(self):
            if self.torch_compile and self.torch_compile_backend is None:
                self.torch_compile_backend = "inductor"

    return types.SimpleNamespace(TrainingArguments=TrainingArguments)


def test_training_arguments_default_only_when_compiling_without_a_backend(monkeypatch):
    monkeypatch.setattr(autoselect, "neuron_name_owner", lambda: None)
    mod = _fake_training_args()
    autoselect._patch_training_arguments(mod)
    autoselect._patch_training_arguments(mod)  # idempotent: not wrapped twice
    TA = mod.TrainingArguments
    assert TA(torch_compile=True).torch_compile_backend == "neuron"
    assert TA(torch_compile=True, torch_compile_backend="eager").torch_compile_backend == "eager"
    assert TA().torch_compile_backend is None


def test_name_taken_by_another_package(monkeypatch):
    monkeypatch.setattr(autoselect, "neuron_name_owner", lambda: "torch_neuronx")
    with pytest.warns(RuntimeWarning, match="belongs to torch_neuronx"):
        assert autoselect.backend_name() == "neuron_inductor"
    autoselect.backend_name.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once only
        assert autoselect.backend_name() == "neuron_inductor"
        mod = _fake_training_args()
        autoselect._patch_training_arguments(mod)  # transformers already handles torch-neuronx
        assert mod.TrainingArguments(torch_compile=True).torch_compile_backend == "inductor"


def test_autoload_never_raises(monkeypatch):
    def explode():
        raise OSError("sysfs went away")

    monkeypatch.setattr(autoselect, "install_default", explode)
    autoselect.autoload()
    assert autoselect.errors == ["autoload: OSError: sysfs went away"]
    monkeypatch.setitem(sys.modules, "neuron_inductor.autoselect", None)  # import itself fails
    _autoload.autoload()


# ---------------------------------------------------------------- end to end, fresh interpreter

_PROBE = textwrap.dedent("""
    import json, sys
    import torch
    out = {"dynamo_loaded_by_import_torch": "torch._dynamo" in sys.modules}
    from torch._dynamo.backends.registry import get_default_backend, _COMPILER_FNS
    out["default"] = get_default_backend()
    if @@COMPILE@@:
        f = lambda x: torch.relu(x) * 2 + 1
        x = torch.randn(5, 3)
        torch.testing.assert_close(torch.compile(f)(x), f(x))
        fn = _COMPILER_FNS.get("neuron")
        out["compiled_with"] = getattr(fn, "__module__", None)
    from transformers import TrainingArguments
    a = TrainingArguments(output_dir="@@TMP@@", torch_compile=True, report_to="none")
    out["trainer_backend"] = a.torch_compile_backend
    out["ours_loaded"] = sorted(m for m in sys.modules if m.startswith("neuron_inductor.")
                                and m not in ("neuron_inductor._autoload", "neuron_inductor.autoselect"))
    print("PROBE" + json.dumps(out))
""")


def _probe(host: str, tmp_path, compile_: bool = False) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_INDUCTOR_", "_NEURON"))}
    env.update(NEURON_INDUCTOR_HOST=host, TORCH_DEVICE_BACKEND_AUTOLOAD="1",
               NEURON_INDUCTOR_CACHE_DIR=str(tmp_path / "cache"))
    code = _PROBE.replace("@@COMPILE@@", str(compile_)).replace("@@TMP@@", str(tmp_path / "out"))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("PROBE")][-1]
    return json.loads(line[5:])


pytest.importorskip("transformers")
_HAVE_BACKEND = importlib.util.find_spec("neuron_inductor.backend") is not None


def test_simulated_trainium_host_selects_neuron_with_no_import(tmp_path):
    out = _probe("trn2", tmp_path, compile_=_HAVE_BACKEND)
    assert out["dynamo_loaded_by_import_torch"] is False  # the hook stays lazy
    assert out["default"] == "neuron"
    assert out["trainer_backend"] == "neuron"
    if _HAVE_BACKEND:
        assert out["compiled_with"].startswith("neuron_inductor")
        # our compiler really ran (not just got registered): its cache entry is on disk
        assert list((tmp_path / "cache").rglob("manifest.json"))


def test_trainer_default_when_transformers_is_imported_before_torch(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_INDUCTOR_", "_NEURON"))}
    env.update(NEURON_INDUCTOR_HOST="trn2", TORCH_DEVICE_BACKEND_AUTOLOAD="1")
    code = ("from transformers import TrainingArguments\n"  # imports torch half-way through itself
            f"a = TrainingArguments(output_dir={str(tmp_path / 'out')!r}, torch_compile=True, "
            "report_to='none')\nprint('BACKEND', a.torch_compile_backend)")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "BACKEND neuron" in res.stdout


def test_elsewhere_nothing_changes(tmp_path):
    out = _probe("none", tmp_path)
    assert out["default"] == "inductor"
    assert out["trainer_backend"] == "inductor"
    assert out["ours_loaded"] == []  # the hook imported nothing of ours beyond the autoload stub


# ---------------------------------------------------------------- the name `neuron` with TorchNeuron

_FAKE_BACKEND = """
CALLS = []


def backend(gm, example_inputs):
    CALLS.append(len(example_inputs))
    return gm.forward
"""

_NAME_PROBE = textwrap.dedent("""
    import json, sys
    sys.path.@@WHERE@@
    import torch
    from torch._dynamo.backends.registry import _COMPILER_FNS, get_default_backend
    f = lambda x: torch.relu(x) * 2 + 1
    x = torch.randn(5, 3)
    torch.compile(f, backend="neuron")(x)
    torch._dynamo.reset()
    torch.compile(f, backend="neuron_inductor")(x)
    import fake_neuronx_backend
    print("PROBE" + json.dumps({"neuron": _COMPILER_FNS["neuron"].__module__,
                                "neuron_inductor": _COMPILER_FNS["neuron_inductor"].__module__,
                                "default": str(get_default_backend()),
                                "fake_calls": len(fake_neuronx_backend.CALLS)}))
""")


@pytest.fixture(scope="module")
def competing_distribution(tmp_path_factory):
    """A stand-in distribution registering a competing ``neuron`` torch.compile backend."""
    site = tmp_path_factory.mktemp("fake_site")
    (site / "fake_neuronx_backend.py").write_text(_FAKE_BACKEND)
    info = site / "fake_neuronx-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-neuronx\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[torch_dynamo_backends]\nneuron = fake_neuronx_backend:backend\n")
    return site


def _name_probe(site, tmp_path, first: bool, setting: str | None, host: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_INDUCTOR_", "_NEURON"))}
    env.update(NEURON_INDUCTOR_HOST=host, TORCH_DEVICE_BACKEND_AUTOLOAD="1",
               NEURON_INDUCTOR_CACHE_DIR=str(tmp_path / "cache"))
    if setting:
        env["NEURON_INDUCTOR_NEURON_BACKEND"] = setting
    where = f"insert(0, {str(site)!r})" if first else f"append({str(site)!r})"
    res = subprocess.run([sys.executable, "-c", _NAME_PROBE.replace("@@WHERE@@", where)], env=env,
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("PROBE")][-1]
    return json.loads(line[5:])


@pytest.mark.parametrize("first", [True, False], ids=["theirs-read-first", "ours-read-first"])
def test_neuron_means_torchneuron_by_default_whatever_the_entry_point_order(
        competing_distribution, tmp_path, first):
    out = _name_probe(competing_distribution, tmp_path, first, None, "trn2")
    assert out["neuron"] == "fake_neuronx_backend" and out["fake_calls"] == 1
    assert out["neuron_inductor"] == "neuron_inductor.backend"
    assert out["default"] == "inductor"  # on a Trainium host the default is the owner's to set


def test_the_setting_gives_neuron_to_neuron_inductor(competing_distribution, tmp_path):
    out = _name_probe(competing_distribution, tmp_path, True, "neuron_inductor", "trn2")
    assert out["neuron"] == "neuron_inductor.backend" and out["fake_calls"] == 0
    assert out["neuron_inductor"] == "neuron_inductor.backend"
    assert out["default"] == "neuron"  # auto-selection follows the same rule


def test_name_rule_in_process(monkeypatch):
    monkeypatch.setattr(autoselect, "_competitor", lambda: "torch_neuronx")
    rule = autoselect.neuron_name_rule()
    assert (rule.owner, rule.ours) == ("torch_neuronx", False) and "unset" in rule.why
    autoselect.neuron_name_rule.cache_clear()
    monkeypatch.setenv("NEURON_INDUCTOR_NEURON_BACKEND", "neuron_inductor")
    assert autoselect.neuron_name_rule().ours
    autoselect.neuron_name_rule.cache_clear()
    monkeypatch.setenv("NEURON_INDUCTOR_NEURON_BACKEND", "bogus")
    assert not autoselect.neuron_name_rule().ours  # the default, and the error is recorded
    assert any("NEURON_INDUCTOR_NEURON_BACKEND" in e for e in autoselect.errors)
