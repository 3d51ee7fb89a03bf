"""What an NKI kernel may reach: an explicit allowlist of names per module (``nl``, ``nisa``).

One table, read by both enforcers: the static kernel check (``codegen/check.py``, also behind
``neuron-inductor lint`` and hand-written kernels) accepts ``nl.<name>`` / ``nisa.<name>`` only for
these names (and ``nl.tile_size.<field>``, ``nisa.engine.<field>``), and the simulator's ``nl`` /
``nisa`` objects (``runtime/sim/namespace.py``) *are* these names and nothing else: no ``nl.np``,
no module object behind any attribute. Everything here is a documented NKI name (nki/api/nki/
language and nki/api/nki/isa in aws-neuron/aws-neuron-sdk; the operator and activation tables in
nki/api/nki.api.shared.rst, see ``ops.py``).
"""
from __future__ import annotations

from .instrs import INSTRS
from .ops import ActFunc, AluOp

NL_DTYPES = frozenset({"float32", "bfloat16", "float16", "int32", "uint32", "int16", "uint16", "int8",
                       "uint8", "bool_"})
NL_BUFFERS = frozenset({"sbuf", "psum", "hbm", "private_hbm", "shared_hbm"})
NL_FUNCTIONS = frozenset({"ndarray", "zeros", "affine_range", "sequential_range", "static_range",
                          "program_id", "num_programs"})
#: ALU operators and activation functions, plus the ``nl`` math functions the simulator also has
NL_OPS = frozenset({o.value for o in AluOp} | {a.value for a in ActFunc} | {"cos", "divide", "negative"})
NL_SUBSPACES = {"tile_size": frozenset({"pmax", "psum_fmax", "psum_bank_fmax", "gemm_stationary_fmax",
                                        "gemm_moving_fmax", "bn_stats_fmax"})}

NISA_FUNCTIONS = frozenset(INSTRS)
NISA_ENGINES = frozenset({"tensor_engine", "vector_engine", "scalar_engine", "gpsimd_engine",
                          "unknown_engine"})
NISA_SUBSPACES = {"engine": frozenset({"tensor", "vector", "scalar", "gpsimd", "unknown"})}

#: ``{module: names}``: what ``<module>.<name>`` may name
NAMES: dict[str, frozenset[str]] = {
    "nl": NL_DTYPES | NL_BUFFERS | NL_FUNCTIONS | NL_OPS | frozenset(NL_SUBSPACES),
    "nisa": NISA_FUNCTIONS | NISA_ENGINES | frozenset(NISA_SUBSPACES),
}
#: ``{module: {name: fields}}``: the plain-value namespaces one level further down
SUBSPACES: dict[str, dict[str, frozenset[str]]] = {"nl": NL_SUBSPACES, "nisa": NISA_SUBSPACES}


def allowed(dotted: str) -> bool:
    """Whether ``dotted`` (``"nl.add"``, ``"nl.tile_size.pmax"``) is a name a kernel may use."""
    parts = dotted.split(".")
    if len(parts) < 2 or parts[0] not in NAMES or parts[1] not in NAMES[parts[0]]:
        return False
    if len(parts) == 2:
        return True
    sub = SUBSPACES[parts[0]].get(parts[1])
    return len(parts) == 3 and sub is not None and parts[2] in sub


__all__ = ["NAMES", "SUBSPACES", "allowed"]
