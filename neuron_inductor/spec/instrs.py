"""The ``nisa`` instructions neuron_inductor emits: engines per NeuronCore version, default engine
and keyword order (destination first), as data.

Engines (``nki/api/nki/isa/__init__.py``, each function's docstring and ``engine`` parameter):
nc_matmul: Tensor; nc_transpose: Tensor or Vector; activation: Scalar; tensor_tensor: Vector or
GpSimd; tensor_scalar: Vector, Scalar or GpSimd; tensor_reduce: Vector; tensor_copy: Vector, Scalar
(not on NeuronCore-v2) or GpSimd; tensor_copy_predicated: Vector; memset: Vector or GpSimd; iota:
GpSimd; affine_select: GpSimd; tensor_tensor_scan: Vector; nc_n_gather: GpSimd; dma_copy: the DMA
queues. NeuronCore-v4 (trn3) keeps every one of these engine lists: its docstring additions are
tensor indirection (``.indirect()`` views), DMA ``priority`` and new instructions (``nc_matmul_mx``,
``quantize_mx``, ``exponential``, ``activate2``, ``rand2``), none of which we emit. What v4 changes
in the instructions we do emit is ``nc_matmul``'s (see the ``MATMUL_*`` tables).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

#: every dtype of ``tbl-dtype`` (nki.api.shared.rst) the compiler may declare, by ``nl`` name
INT_DTYPES = frozenset({"uint8", "int8", "uint16", "int16", "uint32", "int32"})
FLOAT_DTYPES = frozenset({"float8_e4m3", "float8_e5m2", "float8_e4m3fn", "float16", "bfloat16",
                          "tfloat32", "float32"})
DTYPES = INT_DTYPES | FLOAT_DTYPES | {"bool_"}
#: nc_matmul input dtypes (nc_matmul 'Data types', NeuronCore-v2/v3)
MATMUL_DTYPES = frozenset({"float8_e4m3", "float8_e5m2", "bfloat16", "float16", "tfloat32", "float32"})
#: the NeuronCore versions the per-generation tables have rows for (2 = trn1, 3 = trn2, 4 = trn3)
NC_VERSIONS = (2, 3, 4)
#: nc_matmul input dtypes per NeuronCore version: "Starting NeuronCore-v4, float8_e4m3fn (OCP FP8)
#: is also supported; float8_e4m3 (legacy) and float8_e4m3fn cannot be mixed in the same matmul"
MATMUL_IN_DTYPES: dict[int, frozenset[str]] = {2: MATMUL_DTYPES, 3: MATMUL_DTYPES,
                                               4: MATMUL_DTYPES | {"float8_e4m3fn"}}
#: nc_matmul dst dtypes: "The dst tile must be a float32 tile in NeuronCore-v2 and NeuronCore-v3.
#: Starting NeuronCore-v4, dst can either be a float32 or bfloat16 tile"
MATMUL_DST_DTYPES: dict[int, frozenset[str]] = {2: frozenset({"float32"}), 3: frozenset({"float32"}),
                                                4: frozenset({"float32", "bfloat16"})}
#: nc_matmul moving free size per dst dtype: "On NeuronCore-v2 and -v3, the free dimension size of
#: moving tile must not exceed 512 ... Starting NeuronCore-v4, ... up to 4096 for float32 dst or
#: 8192 for bfloat16 dst, matching the size of 8x PSUM banks" (the tile planners still use 512:
#: ``Target.matmul_n_max``)
MATMUL_MOVING_FMAX: dict[int, dict[str, int]] = {2: {"float32": 512}, 3: {"float32": 512},
                                                 4: {"float32": 4096, "bfloat16": 8192}}
#: matmul accumulating onto PSUM a non-matmul instruction initialised: "On NeuronCore-v2 and
#: NeuronCore-v3 ... is not supported and is undefined behavior on hardware" (nc_matmul note)
MATMUL_ACCUMULATE_NONMATMUL_REFUSED: dict[int, bool] = {2: True, 3: True, 4: False}
#: tensor_copy_predicated predicate dtypes
PREDICATE_DTYPES = frozenset({"uint8", "uint16", "uint32"})



class Engine(StrEnum):
    """The engines of a NeuronCore (``nisa.<name>_engine``) and the DMA queues. A ``StrEnum``, so
    ``Engine.vector == "vector"`` and the IR, the simulator and the cost model may key on either."""

    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    dma = "dma"


ENGINES = tuple(e.value for e in Engine)
MEMORIES = ("sbuf", "psum", "hbm")


@dataclass(frozen=True)
class InstrSpec:
    name: str
    #: engines per NeuronCore version (2 = trn1, 3 = trn2, 4 = trn3)
    engines: dict[int, tuple[str, ...]]
    #: the engine used when the call names none (``engine=nisa.engine.unknown``)
    default_engine: str
    #: keyword order after ``dst`` (codegen spells calls in this order)
    keywords: tuple[str, ...]
    #: keywords that are tile operands (the rest are attributes)
    tiles: tuple[str, ...]

    def all_engines(self) -> tuple[str, ...]:
        seen: list[str] = []
        for es in self.engines.values():
            seen += [e for e in es if e not in seen]
        return tuple(seen)


def _same(*engines: str) -> dict[int, tuple[str, ...]]:
    return {v: engines for v in NC_VERSIONS}


INSTRS: dict[str, InstrSpec] = {s.name: s for s in (
    InstrSpec("nc_matmul", _same("tensor"), "tensor", ("stationary", "moving", "accumulate"),
              ("stationary", "moving")),
    InstrSpec("nc_transpose", _same("tensor", "vector"), "tensor", ("data",), ("data",)),
    InstrSpec("activation", _same("scalar"), "scalar",
              ("op", "data", "bias", "scale", "reduce_op", "reduce_res"), ("data", "bias", "scale", "reduce_res")),
    InstrSpec("tensor_tensor", _same("vector", "gpsimd"), "vector", ("data1", "data2", "op"), ("data1", "data2")),
    InstrSpec("tensor_scalar", _same("vector", "scalar", "gpsimd"), "vector",
              ("data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1"),
              ("data", "operand0", "operand1")),
    InstrSpec("tensor_reduce", _same("vector"), "vector", ("op", "data", "axis", "negate", "keepdims"), ("data",)),
    InstrSpec("tensor_copy", {2: ("vector", "gpsimd"), 3: ("vector", "scalar", "gpsimd"),
                              4: ("vector", "scalar", "gpsimd")}, "vector", ("src",), ("src",)),
    InstrSpec("tensor_copy_predicated", _same("vector"), "vector", ("src", "predicate", "reverse_pred"),
              ("src", "predicate")),
    InstrSpec("memset", _same("vector", "gpsimd"), "vector", ("value",), ()),
    InstrSpec("iota", _same("gpsimd"), "gpsimd", ("pattern", "offset", "channel_multiplier"), ()),
    InstrSpec("affine_select", _same("gpsimd"), "gpsimd",
              ("pattern", "channel_multiplier", "on_true_tile", "on_false_value", "cmp_op", "offset"),
              ("on_true_tile",)),
    InstrSpec("tensor_tensor_scan", _same("vector"), "vector",
              ("data0", "data1", "initial", "op0", "op1", "reverse0", "reverse1"), ("data0", "data1", "initial")),
    InstrSpec("nc_n_gather", _same("gpsimd"), "gpsimd", ("data", "indices"), ("data", "indices")),
    InstrSpec("dma_copy", _same("dma"), "dma", ("src",), ("src",)),
)}

#: instructions the tile IR models as ``Instr`` (DMA is its own statement)
COMPUTE_INSTRS = tuple(n for n in INSTRS if n != "dma_copy")


def instr_spec(name: str) -> InstrSpec | None:
    return INSTRS.get(name)
