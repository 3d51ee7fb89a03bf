"""Kernel groups -> tile IR. Importing this package registers every lowering.

``lower_graph(gm, groups, cfg, name)`` lowers a graph the partitioner (``graph/fusion.py``) has cut
into :class:`~.groups.Group` s; ``neuron_inductor.pipeline`` runs both.
"""
from . import pointwise  # noqa: F401  (registers pointwise ops and reductions)
from .matmul import gemm  # noqa: F401  (mm, bmm with their epilogue)
from .fused import emitter  # noqa: F401  (group lowering: fused pointwise and reductions)
from .matmul import multi, prologue, rows  # noqa: F401  (group lowerings: sibling GEMMs, fused lhs, row GEMM)
from .attention import forward  # noqa: F401  (flash attention forward)
from .attention import backward  # noqa: F401  (flash attention backward)
from .attention import explicit  # noqa: F401  (explicit softmax attention on the flash forward)
from . import indexing  # noqa: F401  (embedding, cat, scatter...)
from . import scan  # noqa: F401  (cumsum, cumprod)
from . import flip  # noqa: F401
from . import repeat  # noqa: F401
from . import shifts  # noqa: F401  (integer right shift)
from . import rotary  # noqa: F401  (rotary embedding forward and backward)
from .layout import LoweringError
from .graph import FallbackError, LoweredGraph, lower_graph  # noqa: E402  (after the registrations)
from .groups import Group

__all__ = ["FallbackError", "Group", "LoweredGraph", "LoweringError", "lower_graph"]
