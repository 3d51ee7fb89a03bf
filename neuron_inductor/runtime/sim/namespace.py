"""The simulator's ``nl`` and ``nisa`` as kernels see them: exactly the allowlisted names.

``language.py`` and ``isa.py`` are ordinary modules: they import numpy, helpers and each other, and
a kernel given the module itself could walk ``nl.np.f2py.os``. A kernel is given a
:class:`Namespace` instead, which answers only the names of ``spec/namespace.py`` (the same table
the static check enforces), resolves them in the implementing module, and refuses everything else,
private and dunder names included. Its values are functions, dtypes, buffers, operators and plain
value namespaces (``tile_size``, ``engine``), never a module (checked when built).
"""
from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Any

from ...spec.namespace import NAMES, SUBSPACES


class Namespace:
    """A read-only view of ``module`` that holds exactly ``names``."""

    __slots__ = ("_label", "_module", "_names", "_subspaces")

    def __init__(self, label: str, module: ModuleType) -> None:
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_names", NAMES[label])
        object.__setattr__(self, "_subspaces", SUBSPACES[label])

    def __getattribute__(self, name: str) -> Any:
        get = object.__getattribute__
        if name.startswith("__") and name in ("__class__", "__repr__", "__dir__", "__setattr__",
                                              "__delattr__", "__getattribute__"):
            return get(self, name)
        label = get(self, "_label")
        if name not in get(self, "_names"):
            raise AttributeError(f"{label}.{name} is not supported by the neuron_inductor NKI simulator: "
                                 "kernels may use only the documented NKI names listed in "
                                 "neuron_inductor/spec/namespace.py")
        value = getattr(get(self, "_module"), name)
        fields = get(self, "_subspaces").get(name)
        if fields is not None:  # a plain-value namespace: copy just its listed fields
            value = SimpleNamespace(**{f: getattr(value, f) for f in fields})
        if isinstance(value, ModuleType):
            raise AttributeError(f"{label}.{name} is a module; kernels never reach modules")
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{object.__getattribute__(self, '_label')} is read-only")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{object.__getattribute__(self, '_label')} is read-only")

    def __dir__(self) -> list[str]:
        return sorted(object.__getattribute__(self, "_names"))

    def __repr__(self) -> str:
        return f"<NKI namespace {object.__getattribute__(self, '_label')} (simulator)>"


__all__ = ["Namespace"]
