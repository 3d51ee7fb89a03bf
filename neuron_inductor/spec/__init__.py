"""The NKI instruction specification: one table of the documented rules, read by every stage.

Leaf package (imports only ``neuron_inductor.target``): ``ops`` (ALU operators and activation
functions as ``StrEnum``s, their engines, valid input ranges), ``instrs`` (per instruction: engines
per NeuronCore version, default engine, keyword order), ``rules`` (rule ids, text, citations) and
``checks`` (the one implementation of the rules). docs/nki-rules.md lists the rules with quotes.
"""
from .checks import (FP32_EXACT_INT, Opnd, accumulate_onto_nonmatmul_refused, activation_range_finding,
                     check_indirect, check_instr, float_to_int_finding, int_compare_finding, int_overflow_finding,
                     reduce_axis_finding, resolve_engine, transpose_nonfinite_finding)
from .instrs import (COMPUTE_INSTRS, DTYPES, ENGINES, Engine, FLOAT_DTYPES, INSTRS, INT_DTYPES, NC_VERSIONS, InstrSpec,
                     instr_spec)
from .ops import ACT_RANGE, ALU_ENGINES, ActFunc, AluOp, act_func, alu_op, check_op_names, name_of
from .rules import RULES, Finding, Rule

__all__ = ["ACT_RANGE", "ALU_ENGINES", "ActFunc", "AluOp", "COMPUTE_INSTRS", "DTYPES", "ENGINES", "Engine",
           "FLOAT_DTYPES", "FP32_EXACT_INT", "Finding", "INSTRS", "INT_DTYPES", "InstrSpec", "NC_VERSIONS", "Opnd",
           "RULES", "Rule", "accumulate_onto_nonmatmul_refused", "act_func", "activation_range_finding", "alu_op",
           "check_indirect", "check_op_names", "check_instr", "float_to_int_finding", "instr_spec",
           "int_compare_finding", "int_overflow_finding", "name_of", "reduce_axis_finding", "resolve_engine",
           "transpose_nonfinite_finding"]
