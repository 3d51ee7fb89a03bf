"""Auto-selection: on a Trainium host, make ``neuron`` the backend users get without asking.

Two things happen on such a host, both with no import in user code (torch calls :func:`autoload`
through its ``torch.backends`` entry point while ``import torch`` runs):

* ``torch.compile(model)`` with no ``backend=`` uses ``neuron`` (``torch._dynamo``'s
  ``set_default_backend``);
* Hugging Face ``TrainingArguments(torch_compile=True)`` with no ``torch_compile_backend`` picks
  ``neuron`` (transformers only does that itself when ``torch_neuronx`` is importable).

Everything here runs inside ``import torch``, so it must be cheap and must never raise. Importing
``torch._dynamo`` costs about a second, so nothing is imported eagerly: a one-shot post-import hook on
``sys.meta_path`` applies each change the moment torch (or transformers) loads the module it concerns.

Elsewhere nothing changes. When TorchNeuron (``torch-neuronx``) is installed too, two packages claim
the backend name ``neuron`` and torch's registry would keep whichever entry point it reads first. The
rule here makes it deterministic (:func:`neuron_name_rule`): ``neuron`` means TorchNeuron's compiler
(its documented name; it also sets the defaults on a Trainium host), unless
``NEURON_INDUCTOR_NEURON_BACKEND=neuron_inductor`` (``config.NEURON_NAME_ENV``) gives it to this
package, which then also takes the defaults. ``backend="neuron_inductor"`` is always ours. The rule
is applied in torch's registry the moment it discovers entry points, on any host.
"""
from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import stat
import sys
import warnings
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable

#: declares the host kind instead of detecting it: ``trn1``, ``trn2``, ``trn3`` or ``none``
HOST_ENV = "NEURON_INDUCTOR_HOST"
#: private: a directory standing in for ``/`` when reading ``/dev`` and ``/sys`` (tests only)
_ROOT_ENV = "_NEURON_INDUCTOR_SYSROOT"

AMAZON_PCI_VENDOR = 0x1D0F
#: PCI device ids of Trainium chips (0x7264 is Inferentia2: not a Trainium, not selected). No
#: Trainium3 id is documented in the public Neuron docs we could find, so a trn3 host is recognised by
#: the name the Neuron driver's sysfs reports (``trn3...``) or declared with NEURON_INDUCTOR_HOST=trn3.
TRAINIUM_PCI_DEVICES: dict[int, str] = {0x7164: "trn1", 0x7364: "trn2"}
HOST_KINDS = ("trn1", "trn2", "trn3")

OUR_NAME = "neuron"
FALLBACK_NAME = "neuron_inductor"

_REGISTRY_MODULE = "torch._dynamo.backends.registry"
_TRAINING_ARGS_MODULE = "transformers.training_args"
_HF_CACHE_MODULE = "transformers.cache_utils"


@dataclass(frozen=True)
class Detection:
    """What detection found, and from where; ``doctor`` prints it so a wrong guess is explainable."""
    kind: str | None
    source: str  # "env", "pci", "sysfs", "dev", or "none"
    evidence: tuple[str, ...] = field(default=())


def _root() -> str:
    return os.environ.get(_ROOT_ENV) or "/"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _pci_trainium(root: str) -> tuple[str | None, list[str]]:
    """Scan PCI functions for Amazon vendor id + a Trainium device id; reads ``device`` lazily."""
    base = os.path.join(root, "sys", "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return None, []
    for name in names:
        vendor = _read(os.path.join(base, name, "vendor"))
        if vendor is None:
            continue
        try:
            if int(vendor, 16) != AMAZON_PCI_VENDOR:
                continue
            device = int(_read(os.path.join(base, name, "device")) or "", 16)
        except ValueError:
            continue
        if device in TRAINIUM_PCI_DEVICES:
            return TRAINIUM_PCI_DEVICES[device], [f"pci {name} {AMAZON_PCI_VENDOR:#06x}:{device:#06x}"]
    return None, []


def _dev_nodes(root: str) -> list[str]:
    base = os.path.join(root, "dev")
    try:
        names = [n for n in os.listdir(base) if n.startswith("neuron") and n[6:].isdigit()]
    except OSError:
        return []
    found = []
    for n in sorted(names):
        try:
            if stat.S_ISCHR(os.stat(os.path.join(base, n)).st_mode):
                found.append(f"/dev/{n}")
        except OSError:
            continue
    return found


def _sysfs_kind(root: str) -> tuple[bool, str | None]:
    """Whether the Neuron driver's sysfs tree exists, and the kind its device names, if any."""
    base = os.path.join(root, "sys", "devices", "virtual", "neuron_device")
    if not os.path.isdir(base):
        return False, None
    try:
        devices = sorted(n for n in os.listdir(base) if n.startswith("neuron"))
    except OSError:
        return True, None
    for dev in devices[:1]:
        arch = os.path.join(base, dev, "info", "architecture")
        for leaf in ("instance_type", "device_name"):
            text = (_read(os.path.join(arch, leaf)) or "").lower()
            for kind in HOST_KINDS:
                if text.startswith(kind) or f" {kind}" in text:
                    return True, kind
            if text.startswith("inf"):
                return True, "inf"
    return True, None


def detect() -> Detection:
    """Detect the host kind. Cheap: a few ``stat``s and, at most, one small file per PCI function.

    The PCI id names the generation. Device nodes or the driver's sysfs tree without a recognised
    id fall back to the name sysfs reports; an Inferentia is not a Trainium (None); a Neuron device
    of unknown generation is taken as the newest one we know (trn2).
    """
    declared = os.environ.get(HOST_ENV, "").strip().lower()
    if declared:
        if declared in HOST_KINDS:
            return Detection(declared, "env", (f"{HOST_ENV}={declared}",))
        return Detection(None, "env", (f"{HOST_ENV}={declared}",))
    root = _root()
    kind, evidence = _pci_trainium(root)
    if kind is not None:
        return Detection(kind, "pci", tuple(evidence))
    nodes = _dev_nodes(root)
    has_sysfs, sys_kind = _sysfs_kind(root)
    if not nodes and not has_sysfs:
        return Detection(None, "none")
    evidence = nodes + (["/sys/devices/virtual/neuron_device"] if has_sysfs else [])
    source = "sysfs" if has_sysfs else "dev"
    if sys_kind == "inf":
        return Detection(None, source, tuple(evidence + ["sysfs names an Inferentia"]))
    return Detection(sys_kind or "trn2", source, tuple(evidence))


@functools.lru_cache(maxsize=1)
def _cached_detect() -> Detection:
    return detect()


def host_kind() -> str | None:
    """``"trn1"``/``"trn2"``/``"trn3"`` on a Trainium host (detected or declared by ``NEURON_INDUCTOR_HOST``)."""
    return _cached_detect().kind


def reset_detection() -> None:
    """Forget the cached detection (tests that change the environment call this)."""
    _cached_detect.cache_clear()


# --------------------------------------------------------------------------- name ownership

_DYNAMO_GROUP = "torch_dynamo_backends"


def _ours(value: str) -> bool:
    return value.startswith("neuron_inductor")


def _competitor() -> str | None:
    """Who other than us claims the backend name ``neuron``: an entry point of another distribution
    (TorchNeuron declares ``torch_dynamo_backends: neuron``) or a compiler already registered under
    it. A package that claims nothing leaves nothing to choose."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=_DYNAMO_GROUP):
        if ep.name == OUR_NAME and not _ours(ep.value):
            return ep.value
    reg = sys.modules.get(_REGISTRY_MODULE)
    fn = getattr(reg, "_COMPILER_FNS", {}).get(OUR_NAME) if reg is not None else None
    if fn is not None and not _ours(getattr(fn, "__module__", "") or ""):
        return f"{fn.__module__}.{getattr(fn, '__qualname__', fn)}"
    return None


@dataclass(frozen=True)
class NameRule:
    """Who ``backend="neuron"`` is (``owner``), whether that is us, and why (``doctor`` prints it)."""
    owner: str
    ours: bool
    why: str


@functools.lru_cache(maxsize=1)
def neuron_name_rule() -> NameRule:
    """The one rule for the name ``neuron`` (see the module docstring). Never raises: an invalid
    setting is recorded in :data:`errors` (``doctor`` shows it) and the default applies."""
    from neuron_inductor.config import NEURON_NAME_ENV, ConfigError, neuron_name_setting

    competitor = _competitor()
    if competitor is None:
        return NameRule(FALLBACK_NAME, True, "no other package claims the name")
    try:
        setting = neuron_name_setting()
    except ConfigError as e:
        errors.append(str(e))
        setting = None
    if setting == FALLBACK_NAME:
        return NameRule(FALLBACK_NAME, True, f"{NEURON_NAME_ENV}=neuron_inductor (over {competitor})")
    why = (f"{NEURON_NAME_ENV}=torch_neuronx" if setting else
           f"TorchNeuron is installed and {NEURON_NAME_ENV} is unset")
    return NameRule(competitor, False, why)


def neuron_name_owner() -> str | None:
    """Who other than us ``backend="neuron"`` means (None when it means us)."""
    rule = neuron_name_rule()
    return None if rule.ours else rule.owner


_warned_conflict = False


@functools.lru_cache(maxsize=1)
def backend_name() -> str:
    """The name our backend answers to by the rule: ``neuron``, else ``neuron_inductor``."""
    global _warned_conflict
    owner = neuron_name_owner()
    if owner is None:
        return OUR_NAME
    if not _warned_conflict:
        from neuron_inductor.config import NEURON_NAME_ENV

        _warned_conflict = True
        warnings.warn(f"neuron_inductor: the torch.compile backend name 'neuron' belongs to {owner} "
                      f"here; neuron_inductor is backend='neuron_inductor' (set {NEURON_NAME_ENV}="
                      "neuron_inductor to give it 'neuron')", RuntimeWarning, stacklevel=2)
    return FALLBACK_NAME


def _pin_neuron_entry_point(registry: ModuleType) -> None:
    """Point torch's registry entry for ``neuron`` at the rule's owner (torch keeps the first entry
    point of a name it reads, which depends on installation order)."""
    from importlib.metadata import entry_points

    if OUR_NAME in getattr(registry, "_COMPILER_FNS", {}):
        return  # already loaded under that name: nothing left to choose
    eps = [ep for ep in entry_points(group=_DYNAMO_GROUP) if ep.name == OUR_NAME]
    ours = neuron_name_rule().ours
    chosen = [ep for ep in eps if _ours(ep.value) == ours]
    if chosen:
        registry._BACKENDS[OUR_NAME] = chosen[0]
    elif not ours and registry._BACKENDS.get(OUR_NAME) is not None and \
            _ours(registry._BACKENDS[OUR_NAME].value):
        del registry._BACKENDS[OUR_NAME]  # the owner registers the name itself, without an entry point


def _apply_name_rule(registry: ModuleType) -> None:
    """Make the registry's entry-point discovery apply :func:`neuron_name_rule`."""
    discover = getattr(registry, "_discover_entrypoint_backends", None)
    if discover is None or getattr(discover, "_neuron_inductor_rule", False):
        return
    done = getattr(discover, "cache_info", None) is not None and discover.cache_info().currsize > 0

    @functools.cache
    def discover_with_rule() -> None:
        discover()
        _pin_neuron_entry_point(registry)

    discover_with_rule._neuron_inductor_rule = True  # type: ignore[attr-defined]
    registry._discover_entrypoint_backends = discover_with_rule
    if done:
        discover_with_rule()


# --------------------------------------------------------------------------- post-import hooks

class _PostImportHooks:
    """A ``sys.meta_path`` finder that runs a callback right after a named module has executed.

    One shot per name; removes itself once nothing is left to watch, so later imports pay nothing.
    Callbacks are wrapped: a failure is recorded, never raised into the importing code.
    """

    def __init__(self) -> None:
        self.hooks: dict[str, Callable[[ModuleType], None]] = {}

    def find_spec(self, fullname: str, path=None, target=None):  # noqa: ANN001 - importlib protocol
        hook = self.hooks.pop(fullname, None)
        if hook is None:
            return None
        if not self.hooks:
            self.remove()
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or isinstance(loader, type) or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original(module)
            _guarded(hook, module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def remove(self) -> None:
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


_hooks = _PostImportHooks()
#: errors swallowed by the hooks, for ``neuron-inductor doctor`` to show
errors: list[str] = []
_installed = False


def _guarded(fn: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        fn(module)
    except Exception as exc:  # never break the user's import
        errors.append(f"{fn.__name__}: {type(exc).__name__}: {exc}")


class _WatchedSpec(importlib.machinery.ModuleSpec):
    """A module spec that runs callbacks when the import system marks its module initialised.

    Needed when torch is imported *from inside* a module we want to patch (transformers'
    ``training_args`` imports torch half-way through its body): the module is already in
    ``sys.modules`` but its classes do not exist yet. ``importlib`` sets ``spec._initializing =
    False`` right after the body has run; this property turns that into our trigger, then the spec
    gets its own class back.
    """

    @property
    def _initializing(self) -> bool:
        return self.__dict__.get("_initializing", False)

    @_initializing.setter
    def _initializing(self, value: bool) -> None:
        self.__dict__["_initializing"] = value
        if value:
            return
        callbacks = self.__dict__.pop("_ni_callbacks", [])
        self.__class__ = self.__dict__.pop("_ni_class", importlib.machinery.ModuleSpec)
        module = sys.modules.get(self.name)
        for fn in callbacks:
            if module is not None:
                _guarded(fn, module)


def _after_initialised(spec: importlib.machinery.ModuleSpec, fn: Callable[[ModuleType], None]) -> None:
    if type(spec) is not _WatchedSpec:
        if type(spec) is not importlib.machinery.ModuleSpec:
            return  # an unknown spec class: leave it alone rather than guess its layout
        initializing = spec.__dict__.get("_initializing", True)
        spec.__class__ = _WatchedSpec
        spec.__dict__["_ni_class"] = importlib.machinery.ModuleSpec
        spec.__dict__["_initializing"] = initializing
    spec.__dict__.setdefault("_ni_callbacks", []).append(fn)


def _when_imported(name: str, fn: Callable[[ModuleType], None]) -> None:
    module = sys.modules.get(name)
    if module is not None:
        spec = getattr(module, "__spec__", None)
        if spec is not None and getattr(spec, "_initializing", False):
            _after_initialised(spec, fn)  # we are being imported from inside its body
        else:
            _guarded(fn, module)
        return
    _hooks.hooks[name] = fn
    if _hooks not in sys.meta_path:
        sys.meta_path.insert(0, _hooks)


_want_default = False


def _on_registry(registry: ModuleType) -> None:
    """torch's backend registry has loaded: apply the name rule, and on a Trainium host make the
    owner of ``neuron`` the default when that is us (TorchNeuron sets its own default otherwise)."""
    _apply_name_rule(registry)
    if _want_default and neuron_name_rule().ours:
        registry.set_default_backend(OUR_NAME)


def _patch_training_arguments(training_args: ModuleType) -> None:
    """Default ``torch_compile_backend`` to ``neuron`` when ``torch_compile`` is on and none given.

    This is the branch transformers takes itself for torch-neuronx hosts; we take it for ours, and
    only when the user chose no backend. With torch-neuronx present transformers already does it.
    """
    if backend_name() != OUR_NAME:
        return
    cls = training_args.TrainingArguments
    if getattr(cls, "_neuron_inductor_default", False):
        return
    original = cls.__post_init__

    @functools.wraps(original)
    def __post_init__(self, *args, **kwargs):  # noqa: ANN001, ANN202 - mirrors the dataclass hook
        if getattr(self, "torch_compile", False) and getattr(self, "torch_compile_backend", 1) is None:
            self.torch_compile_backend = OUR_NAME
        return original(self, *args, **kwargs)

    cls.__post_init__ = __post_init__
    cls._neuron_inductor_default = True


def install_default() -> bool:
    """On a Trainium host, make our backend the default for torch.compile and HF Trainer.

    Returns whether anything was installed. Idempotent; does nothing elsewhere.
    """
    global _installed, _want_default
    if host_kind() is None:
        return False
    _want_default = True
    if not _installed:
        _installed = True
        _when_imported(_REGISTRY_MODULE, _on_registry)
        _when_imported(_TRAINING_ARGS_MODULE, _patch_training_arguments)
        _when_imported(_HF_CACHE_MODULE, _register_hf_cache_layers)
    return True


def register_hf_cache_layers() -> None:
    """Register the recompile-free static sliding-window cache layer in transformers now if its
    cache module is loaded, else the moment it loads (whatever the import order of user code)."""
    _when_imported(_HF_CACHE_MODULE, _register_hf_cache_layers)


def _register_hf_cache_layers(cache_utils: ModuleType) -> None:
    """Static sliding-window caches that do not recompile per decode step under our backend (stock
    behaviour unless ``backend="neuron"`` is in use; see integrations.hf.install)."""
    from neuron_inductor.integrations.hf import install
    install(cache_utils)


def install_name_rule() -> None:
    """Apply :func:`neuron_name_rule` when torch's backend registry loads (on any host)."""
    if not _installed:
        _when_imported(_REGISTRY_MODULE, _on_registry)


def autoload() -> None:
    """The ``torch.backends`` entry point torch calls during ``import torch``. Never raises."""
    try:
        if not install_default():
            install_name_rule()
    except Exception as exc:
        errors.append(f"autoload: {type(exc).__name__}: {exc}")
