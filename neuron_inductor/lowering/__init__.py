"""ATen graph -> tile IR. Importing this package registers every lowering.

``lower_graph`` (and its companions) load lazily: the graph-level driver depends on ``graph.fusion``,
which itself reads this package's registries, so importing either package first must work.
"""
from . import pointwise  # noqa: F401  (registers pointwise ops and reductions)
from . import matmul  # noqa: F401
from . import attention  # noqa: F401  (flash attention forward)
from . import attention_bwd  # noqa: F401  (flash attention backward)
from . import indexing  # noqa: F401  (embedding, cat, scatter...)
from . import shifts  # noqa: F401  (integer right shift)
from .layout import LoweringError

__all__ = ["FallbackError", "LoweredGraph", "LoweringError", "lower_graph"]


def __getattr__(name: str):
    if name in ("FallbackError", "LoweredGraph", "lower_graph"):
        from . import graph
        return getattr(graph, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
