"""The ``nisa`` instructions neuron_inductor emits: engines per NeuronCore version, default engine
and keyword order (destination first), as data.

Engines (``nki/api/nki/isa/__init__.py``, each function's docstring and ``engine`` parameter):
nc_matmul: Tensor; nc_transpose: Tensor or Vector; activation: Scalar; tensor_tensor: Vector or
GpSimd; tensor_scalar: Vector, Scalar or GpSimd; tensor_reduce: Vector; tensor_copy: Vector, Scalar
(not on NeuronCore-v2) or GpSimd; tensor_copy_predicated: Vector; memset: Vector or GpSimd; iota:
GpSimd; affine_select: GpSimd; tensor_tensor_scan: Vector; nc_n_gather: GpSimd; dma_copy: the DMA
queues.
"""
from __future__ import annotations

from dataclasses import dataclass

#: every dtype of ``tbl-dtype`` (nki.api.shared.rst) the compiler may declare, by ``nl`` name
INT_DTYPES = frozenset({"uint8", "int8", "uint16", "int16", "uint32", "int32"})
FLOAT_DTYPES = frozenset({"float8_e4m3", "float8_e5m2", "float8_e4m3fn", "float16", "bfloat16",
                          "tfloat32", "float32"})
DTYPES = INT_DTYPES | FLOAT_DTYPES | {"bool_"}
#: nc_matmul input dtypes (nc_matmul 'Data types', NeuronCore-v2/v3)
MATMUL_DTYPES = frozenset({"float8_e4m3", "float8_e5m2", "bfloat16", "float16", "tfloat32", "float32"})
#: tensor_copy_predicated predicate dtypes
PREDICATE_DTYPES = frozenset({"uint8", "uint16", "uint32"})

ENGINES = ("tensor", "vector", "scalar", "gpsimd", "dma")
MEMORIES = ("sbuf", "psum", "hbm")


@dataclass(frozen=True)
class InstrSpec:
    name: str
    #: engines per NeuronCore version (2 = trn1, 3 = trn2)
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
    return {2: engines, 3: engines}


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
    InstrSpec("tensor_copy", {2: ("vector", "gpsimd"), 3: ("vector", "scalar", "gpsimd")}, "vector", ("src",),
              ("src",)),
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
