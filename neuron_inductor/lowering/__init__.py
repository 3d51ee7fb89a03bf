"""ATen graph -> tile IR. Importing this package registers every lowering."""
from . import pointwise  # noqa: F401  (registers pointwise ops and reductions)
from . import matmul  # noqa: F401
from . import attention  # noqa: F401  (flash attention forward / backward)
try:
    from . import indexing  # noqa: F401  (embedding, cat, scatter...)
except ImportError:  # pragma: no cover - during bring-up
    pass
from .graph import FallbackError, LoweredGraph, lower_graph
from .layout import LoweringError

__all__ = ["FallbackError", "LoweredGraph", "LoweringError", "lower_graph"]
