"""Lowering of a custom op that has a registered hand-written NKI kernel: one call of that kernel.

The op's node becomes a :class:`UserKernelCall` host step and the kernel's source goes into the
graph's kernels module, beside the generated kernels: no tile IR is built (the user wrote the
kernel), nothing runs on the host. What lowering still owns is the calling convention:

* a kernel sees each tensor as a dense HBM tensor of the op's logical shape, so a non-contiguous
  input (a transposed weight, a strided slice) is first copied by a generated copy kernel;
* tensors of a type the hardware lacks (int64, float64), empty tensors and non-tensor outputs are
  refused here with a reason: the op then runs as a declared fallback (its eager implementation),
  never as a wrong call of the kernel;
* outputs are dense: when the op's fake implementation gives other strides, consumers read the
  output through the dense layout (the graph lowering's densified set).
"""
from __future__ import annotations

import operator
from typing import Any, Protocol

import torch
import torch.fx as fx

from ..ir import Ref, TensorMeta, UserKernelCall, contiguous_strides
from ..user_kernels import (UserKernel, UserKernelError, hop_kernel, is_nki_hop, lookup, shape_ranks,
                            written_params)
from .layout import LoweringError, meta_of



class GraphLowering(Protocol):
    """What this module uses of ``lowering.graph.GraphLowering`` (its caller), declared here so the
    two modules do not import each other."""

    program: Any
    host: dict[fx.Node, str]
    host_meta: dict[fx.Node, TensorMeta]
    _densified: set[fx.Node]

    def lower_group(self, group: Any) -> None: ...
    def host_value(self, a: fx.Node) -> str: ...
    def _fresh(self, prefix: str) -> str: ...
    def _single(self, n: fx.Node) -> Any: ...


def val(n: fx.Node) -> Any:
    """The fake tensor (or value) Dynamo/AOTAutograd recorded for ``n``."""
    return n.meta.get("val")

aten = torch.ops.aten

#: tensor types a hand-written kernel can receive or return as they are (no word pairs, no bool)
KERNEL_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int16,
                           torch.int8, torch.uint8})


def is_user_kernel_node(n: fx.Node) -> bool:
    return n.op == "call_function" and (lookup(n.target) is not None or is_nki_hop(n.target))




def is_dense(m: TensorMeta) -> bool:
    """Row-major without gaps (strides of size-1 dims do not matter, as for torch's is_contiguous)."""
    return all(s == d for s, d, n in zip(m.stride, contiguous_strides(m.size), m.size) if n != 1)


def schema_args(n: fx.Node) -> list[Any]:
    """The op's arguments in schema order (keywords and defaults filled in)."""
    schema = n.target._schema
    out = []
    for i, a in enumerate(schema.arguments):
        if i < len(n.args):
            out.append(n.args[i])
        elif a.name in n.kwargs:
            out.append(n.kwargs[a.name])
        elif a.has_default_value():
            out.append(a.default_value)
        else:
            raise LoweringError(f"{n.target}: argument {a.name} is missing")
    return out


def _check_tensor(v: Any, what: str) -> None:
    if not isinstance(v, torch.Tensor):
        raise LoweringError(f"{what} is {type(v).__name__}, not a tensor")
    if v.dtype not in KERNEL_DTYPES:
        raise LoweringError(f"{what} has dtype {v.dtype}, which a hand-written kernel cannot take")
    if v.numel() == 0:
        raise LoweringError(f"{what} is empty; a kernel never receives an empty tensor")


def _dense_input(gl: "GraphLowering", n: fx.Node, a: fx.Node) -> fx.Node:
    """``a`` itself when dense, else a contiguous copy of it made by a generated kernel."""
    if is_dense(meta_of(val(a))):
        return a
    graph = n.graph
    with graph.inserting_before(n):
        c = graph.call_function(aten.clone.default, (a,), {"memory_format": torch.contiguous_format})
    c.meta["val"] = val(a).clone(memory_format=torch.contiguous_format)
    n.replace_input_with(a, c)
    gl.lower_group(gl._single(c))
    return c


def _outputs(n: fx.Node) -> list[tuple[fx.Node | None, Any]]:
    """(node that carries the value, fake value) per output: ``n`` itself, or its getitem users."""
    v = val(n)
    if isinstance(v, torch.Tensor):
        return [(n, v)]
    if isinstance(v, (list, tuple)):
        users = {u.args[1]: u for u in n.users if u.target is operator.getitem}
        return [(users.get(i), x) for i, x in enumerate(v)]
    raise LoweringError(f"{n.target} returns {type(v).__name__}; a kernel returns tensors")


def _check_contract(n: fx.Node, uk: UserKernel, args: list[Any]) -> None:
    """What the kernel's source assumes about its parameters, checked against the op before it is
    ever called: the rank it unpacks each shape into, and that it writes only into parameters the op
    declares mutable (``mutates_args``): a kernel writing into an input the op promises not to
    change would silently overwrite the caller's tensor."""
    ranks = shape_ranks(uk.source)
    for p, a in zip(uk.params, args):
        if isinstance(a, fx.Node) and p in ranks and val(a).dim() != ranks[p]:
            raise LoweringError(f"kernel {uk.kernel_name} unpacks {p}.shape into {ranks[p]} sizes, but "
                                f"{uk.op_name} passes a {val(a).dim()}-D tensor of shape "
                                f"{list(val(a).shape)} as {p}")
    written = written_params(uk.source)
    # a wrap_nki launch (higher-order op, no schema) declares no mutation: in-place operands are refused
    arguments = n.target._schema.arguments if hasattr(n.target, "_schema") else []
    for i, p in enumerate(uk.params):
        arg = arguments[i] if i < len(arguments) else None
        mutable = arg is not None and arg.alias_info is not None and arg.alias_info.is_write
        if p in written and not mutable:
            raise LoweringError(f"kernel {uk.kernel_name} writes into its parameter {p}, but op "
                                f"{uk.op_name} does not declare {p} in mutates_args: the caller's "
                                "tensor would be overwritten. Write into an nl.shared_hbm output "
                                "instead (or declare the mutation)")


def emit_user_kernel(gl: "GraphLowering", n: fx.Node) -> None:
    """Append the call of ``n``'s registered kernel to ``gl``'s program."""
    if is_nki_hop(n.target):  # torch_neuronx.wrap_nki(kernel)[grid](...): single-core launches only
        if list(n.kwargs.get("grid") or [1]) != [1] or n.kwargs.get("operand_output_aliases"):
            raise LoweringError(f"{n.target}: grid {n.kwargs.get('grid')} / in-place operands are not "
                                "supported (kernels launch as kernel[1])")
        try:
            uk, args = hop_kernel(n.target, dict(n.kwargs))
        except UserKernelError as e:
            raise LoweringError(str(e)) from e
    else:
        uk = lookup(n.target)
        if uk is None:
            raise LoweringError(f"{n.target} has no registered NKI kernel")
        args = schema_args(n)
    if len(args) != len(uk.params):
        raise LoweringError(f"kernel {uk.kernel_name} takes {len(uk.params)} parameters, op "
                            f"{uk.op_name} passes {len(args)}")
    outs = _outputs(n)
    for i, (_, v) in enumerate(outs):
        _check_tensor(v, f"output {i} of {uk.op_name}")
    for p, a in zip(uk.params, args):
        if isinstance(a, fx.Node):
            _check_tensor(val(a), f"argument {p} of {uk.op_name}")
        elif isinstance(a, (list, tuple)) and any(isinstance(x, fx.Node) for x in a):
            raise LoweringError(f"argument {p} of {uk.op_name} is a list of tensors")
    _check_contract(n, uk, args)
    call_args = []
    for a in args:
        if isinstance(a, fx.Node):
            call_args.append(Ref(gl.host_value(_dense_input(gl, n, a))))
        else:
            call_args.append(a)
    results, metas = [], []
    for node, v in outs:
        m = meta_of(v)
        dense = TensorMeta(m.size, contiguous_strides(m.size), 0, m.dtype)
        name = gl._fresh("u")
        results.append(name)
        metas.append(dense)
        if node is not None:
            gl.host[node] = name
            gl.host_meta[node] = dense
            if dense.stride != m.stride or m.storage_offset:
                gl._densified.add(node)
    gl.program.user_kernels[uk.emitted_name] = uk.source
    gl.program.steps.append(UserKernelCall(uk.emitted_name, uk.op_name, tuple(call_args), results,
                                           metas))
