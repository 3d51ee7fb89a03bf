"""neuron_inductor: a torch.compile backend that compiles graphs to NKI kernels for AWS Trainium."""
from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # loaded on first use: ``import neuron_inductor`` (torch's autoload hook does it) stays cheap
    if name in ("register_nki_kernel", "unregister_nki_kernel", "use_nki_layers"):
        from .integrations import nki_kernels
        return getattr(nki_kernels, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
