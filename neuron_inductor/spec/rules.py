"""Every conformance rule: a stable id, what it says, and where the NKI documentation says it.

Citations are paths in aws-neuron/aws-neuron-sdk at the SDK 2.32 docs (commit 81ce03ae) unless they
name SDK 2.26 (commit 8a38e733, ``general/nki/...``). ``ISA`` = ``nki/api/nki/isa/__init__.py``
(the ``nisa`` docstring stubs), ``SHARED`` = ``nki/api/nki.api.shared.rst``. docs/nki-rules.md is
the human-readable version of this table, with the quotes.
"""
from __future__ import annotations

from dataclasses import dataclass

ISA = "nki/api/nki/isa/__init__.py"
SHARED = "nki/api/nki.api.shared.rst"
SHARED_226 = "SDK 2.26 general/nki/api/nki.api.shared.rst"
APS = "nki/deep-dives/nki-aps.rst"
MIG = "nki/migration/index.rst"


@dataclass(frozen=True)
class Rule:
    id: str
    text: str
    citation: str


_RULES = [
    Rule("instr-known", "only documented nisa instructions are emitted", f"{ISA} (function list)"),
    Rule("engine-allowed", "an instruction runs only on the engines its docstring names for the target",
         f"{ISA} <instruction> docstring, `engine` parameter"),
    Rule("tensor-copy-scalar-v2", "tensor_copy is not supported on the Scalar Engine on NeuronCore-v2 (trn1)",
         f"{ISA} tensor_copy: 'On NeuronCore v2, tensor_copy is not supported on the Scalar Engine'"),
    Rule("alu-op-table", "an ALU operator (op/op0/op1/reduce_op) must be one of table tbl-aluop "
         "(nl.divide is not one)", f"{SHARED} tbl-aluop 'Supported Math Operators by NKI ISA'"),
    Rule("alu-op-engine", "an ALU operator runs only on the engines the operator table lists for it "
         "(subtract, max, min, comparisons, logical and bitvec ops: Vector; power: GpSimd; add/multiply "
         "on Scalar only from NeuronCore-v3)",
         f"{SHARED_226} tbl-aluop 'Supported Engine' column and note; {ISA} tensor_tensor 'op'"),
    Rule("tensor-scalar-gpsimd-rsqrt", "tensor_scalar may run on GpSimd only for rsqrt",
         f"{ISA} tensor_scalar `engine`: 'nki.isa.engine.gpsimd (only allowed for rsqrt)'"),
    Rule("tensor-scalar-scalar-combo", "tensor_scalar on the Scalar Engine of trn2 takes only "
         "(multiply, add), (multiply) or (add)", f"{ISA} tensor_scalar 'The Scalar Engine on trn2 only "
         "supports some operator combinations'"),
    Rule("op-class-mix", "tensor_scalar op0 and op1 must both be bitvec or both arithmetic",
         f"{ISA} tensor_scalar 'must be of the same type'"),
    Rule("bitvec-integer", "bitvec operators need integer input/output dtypes",
         f"{SHARED} tbl-aluop intro; {ISA} tensor_tensor/tensor_scalar/tensor_reduce 'Data types'"),
    Rule("tensor-scalar-fp32-operand", "tensor_scalar operand0/operand1 are compile-time scalars or "
         "[P, 1] tiles, and float32 is the only operand dtype documented: a tile operand must be a float32 "
         "tile whatever the operator (an int32 tile is refused, with bitvec operators too: there only "
         "data/dst are integer, so a bitvec operator takes integer literals); number literals are converted",
         f"{ISA} tensor_scalar signature 'operand0: float | NkiTensor', 'operand0: a scalar constant or a "
         "tile of shape (data.shape[0], 1)', 'the operand0 and operand1 (if used) must be float32', "
         "'If bitvec operators are used, ... the input/output data types must be integer types'"),
    Rule("unary-operand", "a unary operator's operand must be None or 0",
         f"{ISA} tensor_scalar operand0 'Must be None or 0 when op0 is a unary operator'"),
    Rule("reduce-op-legal", "a reduction operator must have 'Legal Reduction op' = Y",
         f"{SHARED} tbl-aluop 'Legal Reduction op' column"),
    Rule("reduce-axis", "tensor_reduce reduces the last contiguous free axes, never axis 0",
         f"{ISA} tensor_reduce 'axis'"),
    Rule("activation-func-table", "activation op must be one of table tbl-act-func (there is no cos)",
         f"{SHARED} tbl-act-func 'Supported Activation Functions by NKI ISA'"),
    Rule("activation-range", "activation input (data*scale+bias) must lie in the function's Valid Input "
         "Range (sin: [-pi, pi]; log, sqrt, rsqrt, reciprocal, arctan: see table)",
         f"{SHARED} tbl-act-func 'Valid Input Range' and the note below it"),
    Rule("activation-reduce-add", "activation reduce_op must be nl.add",
         f"{ISA} activation: 'reduce_op must be nl.add'"),
    Rule("activation-scale-fp32", "activation scale must be a float32 scalar or [N, 1] float32 tile",
         f"{ISA} activation 'The scale parameter must have a float32 data type'"),
    Rule("activation-bias", "activation bias: a [N, 1] tile on NeuronCore-v2 (a scalar only from v3), "
         "any dtype but tfloat32", f"{ISA} activation 'Layout' and 'Data types'"),
    Rule("activation-reciprocal-bias-v2", "activation(op=nl.reciprocal) cannot take a bias on NeuronCore-v2",
         f"{SHARED} nki-engine-sel 'doesn't support setting bias on NeuronCore-v2'"),
    Rule("transpose-same-dtype", "nc_transpose output dtype must equal the input dtype",
         f"{ISA} nc_transpose 'The output dst tile must have the same data type as that of data'"),
    Rule("transpose-shape", "nc_transpose: TensorE <= [128, 128], VectorE <= [32, 32]; dst is [F, P]",
         f"{ISA} nc_transpose 'Tile size'"),
    Rule("matmul-dtype", "nc_matmul inputs are fp8/bf16/fp16/tf32/fp32, plus float8_e4m3fn from "
         "NeuronCore-v4 (fp32/tf32 only with fp32/tf32; float8_e4m3 never with float8_e4m3fn); dst is "
         "float32 on NeuronCore-v2/v3, float32 or bfloat16 from v4", f"{ISA} nc_matmul 'Data types'"),
    Rule("matmul-shape", "nc_matmul: K equal and <= 128, stationary free <= 128, moving free <= 512 "
         "(v2/v3; v4: 4096 for a float32 dst, 8192 for bfloat16), dst [M, N]",
         f"{ISA} nc_matmul 'Tile size' and 'Layout'"),
    Rule("matmul-first-overwrite", "the first nc_matmul into a PSUM location must overwrite "
         "(accumulate=False or None); accumulate=True on an uninitialised location is undefined",
         f"{ISA} nc_matmul 'Accumulation mode'"),
    Rule("matmul-accumulate-nonmatmul", "nc_matmul must not accumulate onto PSUM initialised by a "
         "non-matmul instruction (memset, tensor_copy, ...) on NeuronCore-v2/v3",
         f"{ISA} nc_matmul 'Accumulation mode' note"),
    Rule("memory", "operands live in the memories the instruction allows (TensorE: SBUF in, PSUM out; "
         "compute engines: SBUF/PSUM, never HBM; iota/affine_select dst: SBUF; DMA: HBM/SBUF)",
         f"{ISA} <instruction> 'Memory types'"),
    Rule("gpsimd-no-psum", "GpSimd cannot access PSUM", f"{ISA} tensor_copy / tensor_tensor "
         "'GpSimd Engine cannot access PSUM'"),
    Rule("psum-inputs", "two-input instructions cannot read both inputs from PSUM "
         "(tensor_tensor data1/data2, tensor_copy_predicated src/predicate)",
         f"{ISA} tensor_tensor 'cannot both reside in PSUM'; tensor_copy_predicated"),
    Rule("predicate-dtype", "tensor_copy_predicated: predicate uint8/uint16/uint32; src and dst same dtype",
         f"{ISA} tensor_copy_predicated 'Shape and data type constraints'"),
    Rule("memset-literal-type", "memset value must match the destination dtype: integer tiles take an "
         "integer literal", f"{MIG} 'nisa.memset — strict type matching'"),
    Rule("dtype-known", "tiles use a dtype of table tbl-dtype", f"{SHARED} tbl-dtype"),
    Rule("iota-pattern", "iota pattern has at most 4 [step, num] pairs whose counts multiply to the "
         "elements per partition of dst", f"{ISA} iota"),
    Rule("scan-operator", "tensor_tensor_scan op0/op1 are binary arithmetic operators of tbl-aluop "
         "(not unary, not bitvec); initial is a float32 scalar or a [P, 1] tile",
         f"{ISA} tensor_tensor_scan 'Both op0 and op1 can be any binary arithmetic operator'; 'initial'"),
    Rule("gather-dtype", "nc_n_gather: data, indices and dst in SBUF; dst has data's dtype; indices are "
         "uint32, as many per partition as dst holds, each in [0, elements per partition of data)",
         f"{ISA} nc_n_gather 'Memory types', 'Data types', "
         "'Tile size'"),
    Rule("dma-elements", "dma_copy src and dst hold the same number of elements",
         f"{ISA} dma_copy 'Tile size'"),
    Rule("indirect-dma", "vector-offset indirect DMA: the indexed tensor is in HBM, indirect_dim=0, the "
         "offsets are a [P, 1] SBUF tile", f"{ISA} dma_copy 'Indirect addressing'; {APS} 'Vector Dynamic Access'"),
    Rule("indirect-dma-row-stride", "vector-offset indirect DMA takes the row stride from the base "
         "tensor's shape (elements right of dim 0), ignoring the pattern's; they must agree",
         f"{APS} 'Vector Dynamic Access': 'the stride specified in the leading dimension of the pattern "
         "in the .ap() is currently ignored'"),
    Rule("int-fp32-exact", "integer values above 2^24 compared on an engine that computes in float32 "
         "give wrong answers (arithmetic ops cast inputs to float32)",
         f"{SHARED} tbl-aluop intro 'convert input elements into float32'; {ISA} tensor_tensor 'Float types'"),
    Rule("int32-overflow", "GpSimd's native integer tensor_tensor arithmetic (add, subtract, multiply on "
         "all-int32/uint32 tiles) must not produce a result outside the destination's 32-bit range: the "
         "docs promise exact results for 32-bit values and say nothing of overflow (no wrap-around)",
         f"{ISA} tensor_tensor 'int32/uint32 types: ... native integer arithmetic. This ensures exact "
         "results for all 32-bit integer values'"),
    Rule("transpose-nonfinite-v2", "on NeuronCore-v2 (trn1) a Tensor Engine transpose (nc_transpose on "
         "TensorE, nc_matmul with is_transpose=True) of data holding NaN/Inf is not bit-accurate: refused "
         "(transpose on VectorE, or replace NaN/Inf with finite values first)",
         f"{ISA} nc_transpose 'On NeuronCore-v2, Tensor Engine transpose is not bit-accurate if the input "
         "data contains NaN/Inf. You may consider replacing NaN/Inf with regular floats (float_max/float_min/"
         "zeros) in the input matrix'; nc_matmul 'Transpose mode'"),
    Rule("float-int-conversion", "a float -> integer conversion (an integer dst written from float values: "
         "tensor_copy, dma_copy, the float32 result of an ALU op or activation) of NaN, +-Inf or a value "
         "outside the destination's range is undocumented: refused (the docs define only the cast 'from "
         "float32 to dst.dtype', not these values nor the rounding of fractions)",
         f"{ISA} dma_copy 'first casting from src.dtype to float32, then from float32 to dst.dtype'; "
         "tensor_copy 'intermediate FP32 cast when input and output data types differ'; tensor_tensor "
         "'The float32 results are cast to dst.dtype'"),
]

RULES: dict[str, Rule] = {r.id: r for r in _RULES}
assert len(RULES) == len(_RULES), "duplicate rule id"


@dataclass(frozen=True)
class Finding:
    """One violation: the rule broken and what exactly broke it."""

    rule: str
    detail: str

    @property
    def citation(self) -> str:
        return RULES[self.rule].citation

    def cited(self) -> str:
        """The detail with its citation (callers that print the rule id themselves)."""
        return f"{self.detail} (NKI docs: {self.citation})"

    def message(self) -> str:
        return f"[{self.rule}] {self.cited()}"
