"""The Dynamo-graph tier: a hit here skips AOTAutograd, our decompositions and the partitioner.

Like Inductor's AOTAutograd cache, the key is taken from the graph Dynamo hands the backend plus the
global state that changes what AOTAutograd traces (grad mode, autocast, deterministic algorithms,
functorch config, default dtype), and the entry (``plan.json``, no code of its own) names the
ATen-level entries that serve it and what the runtime wrapper needs to call them. Unlike Inductor's, it
stores no pickles: the plan is strict JSON and the only code that runs is the ATen entries' sources.

Only graphs whose AOTAutograd runtime wrapper is simple are served here: inference graphs (run with
grad mode off) and training graphs (an autograd.Function over the forward and backward entries) with no
input mutations, no outputs aliasing inputs or each other, no random ops, no effect tokens, no tensor
subclasses, no symbolic sizes, nothing but tensors saved for backward, and no autocast. Everything else
goes through AOTAutograd and the ATen-level entries, and the reason is counted in
``stats()["dynamo_bypasses"]``: correctness first.
"""
from __future__ import annotations

import hashlib
import operator
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx

from .. import stats as _stats
from .key import canonical_graph, input_record, qualified_name
from .schema import SCHEMA_VERSION, package_fingerprint
from ..user_kernels import digests_in

_SAFE_MODULES = ("torch", "operator", "_operator", "math", "builtins")


class Bypass(Exception):
    """This Dynamo graph is not served by the Dynamo-level tier (the message is the counted reason)."""


# -- the key ----------------------------------------------------------------------------------------
def params_and_buffers(gm: torch.nn.Module) -> list[torch.Tensor]:
    """What AOTAutograd prepends to the runtime args, in its order."""
    params = dict(gm.named_parameters(remove_duplicate=False))
    buffers = dict(gm.named_buffers(remove_duplicate=False))
    return [*params.values(), *buffers.values()]


def _check_graph(gm: torch.fx.GraphModule) -> None:
    for node in gm.graph.nodes:
        if node.op == "call_module":
            raise Bypass("call_module")
        if node.op == "get_attr":
            obj: Any = gm
            for part in str(node.target).split("."):
                obj = getattr(obj, part)
            if not isinstance(obj, torch.Tensor):
                raise Bypass("subgraph")
        if node.op == "call_function":
            t = node.target
            if isinstance(t, torch._ops.HigherOrderOperator):
                raise Bypass("higher_order_op")
            if isinstance(t, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                continue
            mod = getattr(t, "__module__", None) or ""
            if not (mod.split(".")[0] in _SAFE_MODULES or t in vars(operator).values()):
                raise Bypass("user_function")


def _inputs(args: Sequence[Any]) -> list[dict]:
    seen: dict[int, int] = {}
    out = []
    for i, x in enumerate(args):
        if isinstance(x, torch.SymInt) or (isinstance(x, torch.Tensor) and
                                           any(isinstance(s, torch.SymInt) for s in x.shape)):
            raise Bypass("symbolic_shapes")
        if isinstance(x, torch.Tensor) and type(x) not in (torch.Tensor, torch.nn.Parameter):
            if not type(x).__name__ == "FakeTensor":
                raise Bypass("tensor_subclass")
        rec = input_record(x)
        if isinstance(x, torch.Tensor):
            if id(x) in seen:
                raise Bypass("duplicate_inputs")
            seen[id(x)] = i
            rec["device"] = str(x.device)
        out.append(rec)
    return out


def _state() -> dict[str, Any]:
    """Global state that changes what AOTAutograd traces for the same graph."""
    autocast = {d: str(torch.get_autocast_dtype(d)) for d in torch._C._autocast_supported_devices()
                if torch.is_autocast_enabled(d)}
    if autocast:
        raise Bypass("autocast")
    return {
        "grad_enabled": torch.is_grad_enabled(),
        "autocast": autocast,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "default_dtype": str(torch.get_default_dtype()),
        "functorch_config": hashlib.sha256(torch._functorch.config.save_config()).hexdigest(),
        "inference_mode": torch.is_inference_mode_enabled(),
    }


def make_record(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], cfg: Any) -> dict:
    """The Dynamo-level key record; :class:`Bypass` when the graph is not served at this level."""
    _check_graph(gm)
    pb = params_and_buffers(gm)
    inputs = _inputs([*pb, *example_inputs])
    state = _state()
    record = {
        "schema": SCHEMA_VERSION, "package": package_fingerprint(), "torch": torch.__version__,
        "python": "%d.%d.%d" % sys.version_info[:3], "target": cfg.target, "kind": "dynamo",
        "config": {k: v for k, v in sorted(cfg.code_affecting().items())},
        "inputs": inputs, "state": state, "graph": canonical_graph(gm),
    }
    # the hand-written kernels the graph calls, as in the ATen-level key: editing one recompiles
    digests = digests_in(gm)
    if digests:
        record["user_kernels"] = digests
    return record


# -- what the AOTAutograd compile produced ----------------------------------------------------------
@dataclass
class Recording:
    """ATen-level compiles seen while AOTAutograd ran for one Dynamo graph."""

    keys: dict[str, str] = field(default_factory=dict)
    notes: dict[str, dict] = field(default_factory=dict)
    problem: str | None = None
    #: run when the backward is compiled (AOTAutograd compiles it at the first backward call)
    on_backward: Callable[[], None] | None = None


def note_key(rec: Recording | None, kind: str, key: str) -> None:
    """Called by ``compile_cached``: the ATen-level key of a graph compiled for the recording ``rec``."""
    if rec is not None:
        if kind in rec.keys:
            rec.problem = "several_graphs"
        rec.keys[kind] = key


def note_aten_graph(rec: Recording | None, kind: str, gm: torch.fx.GraphModule,
                    example_inputs: Sequence[Any]) -> None:
    """Called by the backend's ATen compilers: what the runtime wrapper must know about ``gm``."""
    if rec is None:
        return
    try:
        meta = torch._guards.TracingContext.try_get()
        fw = getattr(meta, "fw_metadata", None) if kind != "backward" else None
        rec.notes[kind] = _describe(kind, gm, example_inputs, fw)
    except Bypass as e:
        rec.problem = str(e)
    except Exception as e:  # noqa: BLE001 - an unexpected shape of AOT metadata: just do not store
        rec.problem = f"metadata:{type(e).__name__}"


def _outputs(gm: torch.fx.GraphModule) -> list:
    out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    return list(out.args[0]) if isinstance(out.args[0], (list, tuple)) else [out.args[0]]


#: every field of AOTAutograd's private ``ViewAndMutationMeta`` that :func:`_describe` reads, and of
#: its ``input_info`` / ``output_info`` entries. A torch that renames one must not turn this tier off
#: unnoticed: tests/cache/test_dynamo_aot_fields.py checks each exists on the running torch (and that
#: this list is what ``_describe`` reads); at run time a missing one is a counted bypass naming it.
AOT_META_FIELDS = (
    "num_mutated_inp_runtime_indices", "input_info", "num_outputs_aliased", "num_intermediate_bases",
    "output_info", "is_rng_op_functionalized", "tokens", "grad_enabled_mutation", "subclass_inp_meta",
    "num_symints_saved_for_bw", "num_tensors_saved_with_no_vc_check", "num_backward_tokens",
    "num_unsafe_view_outputs", "indices_of_inputs_that_requires_grad_with_mutations_in_bw")
#: read with a default: fields only some supported torch versions have
AOT_META_OPTIONAL = ("dynamic_outputs", "num_opaque_objects_saved_for_bw")
AOT_INPUT_FIELDS = ("mutates_data", "mutates_metadata", "requires_grad")
AOT_OUTPUT_FIELDS = ("output_type", "raw_type", "requires_grad", "requires_grad_for_backward")


def missing_aot_fields(fw: Any) -> list[str]:
    """The fields :func:`_describe` needs that ``fw`` (one graph's ``ViewAndMutationMeta``) lacks."""
    out = [f for f in AOT_META_FIELDS if not hasattr(fw, f)]
    for name, fields in (("input_info", AOT_INPUT_FIELDS), ("output_info", AOT_OUTPUT_FIELDS)):
        for entry in list(getattr(fw, name, None) or [])[:1]:
            out += [f"{name}.{f}" for f in fields if not hasattr(entry, f)]
    return out


def _describe(kind: str, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], fw: Any) -> dict:
    for node in gm.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and \
                torch.Tag.nondeterministic_seeded in node.target.tags:
            raise Bypass("random_ops")
    n_in = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    if kind == "backward":
        if any(not isinstance(x, torch.Tensor) for x in example_inputs):
            raise Bypass("symbolic_shapes")
        return {"n_inputs": n_in, "strides": [[int(s) for s in x.stride()] for x in example_inputs]}
    if fw is None:
        raise Bypass("no_metadata")
    from torch._functorch._aot_autograd.schemas import OutputType, SubclassCreationMeta

    missing = missing_aot_fields(fw)
    if missing:
        raise Bypass(f"aot_metadata_fields:{','.join(missing)}")
    if fw.num_mutated_inp_runtime_indices or any(i.mutates_data or i.mutates_metadata for i in fw.input_info):
        raise Bypass("input_mutation")
    if fw.num_outputs_aliased or fw.num_intermediate_bases or \
            any(o.output_type != OutputType.non_alias for o in fw.output_info):
        raise Bypass("aliased_outputs")
    if fw.is_rng_op_functionalized or fw.tokens or fw.grad_enabled_mutation is not None:
        raise Bypass("rng_or_effects")
    if any(isinstance(m, SubclassCreationMeta) for m in fw.subclass_inp_meta) or \
            getattr(fw, "dynamic_outputs", False):
        raise Bypass("tensor_subclass")
    if any(not issubclass(o.raw_type, torch.Tensor) for o in fw.output_info):
        raise Bypass("non_tensor_outputs")
    note = {"n_inputs": n_in, "n_outputs": len(fw.output_info)}
    if kind == "forward":
        if fw.num_symints_saved_for_bw or fw.num_tensors_saved_with_no_vc_check or \
                (getattr(fw, "num_opaque_objects_saved_for_bw", 0) or 0) or fw.num_backward_tokens or \
                fw.num_unsafe_view_outputs or fw.indices_of_inputs_that_requires_grad_with_mutations_in_bw:
            raise Bypass("saved_state")
        n_fw_outs = len(_outputs(gm))
        note.update(
            n_saved=n_fw_outs - len(fw.output_info),
            grad_inputs=[i for i, info in enumerate(fw.input_info) if info.requires_grad],
            nondiff_outputs=[i for i, o in enumerate(fw.output_info) if not o.requires_grad],
            tangent_outputs=[i for i, o in enumerate(fw.output_info) if o.requires_grad_for_backward])
    return note


def backward_compiled(rec: Recording | None) -> None:
    """Publish the Dynamo-level entry that was waiting for the backward compile."""
    if rec is not None and rec.on_backward is not None:
        fn, rec.on_backward = rec.on_backward, None
        fn()


def plan_of(rec: Recording, n_runtime_inputs: int) -> dict:
    """The plan for a finished compile; :class:`Bypass` when the recording cannot be served."""
    if rec.problem:
        raise Bypass(rec.problem)
    kinds = set(rec.keys)
    if kinds != set(rec.notes) or kinds not in ({"inference"}, {"forward", "backward"}):
        raise Bypass("not_cached" if kinds <= set(rec.notes) else "partial_compile")
    if kinds == {"inference"}:
        note = rec.notes["inference"]
        if note["n_inputs"] != n_runtime_inputs:
            raise Bypass("deduplicated_inputs")
        return {"mode": "inference", "forward": rec.keys["inference"], "backward": None,
                "n_inputs": n_runtime_inputs, "n_outputs": note["n_outputs"], "n_saved": 0,
                "grad_inputs": [], "nondiff_outputs": [], "tangent_outputs": [], "tangent_strides": []}
    fw, bw = rec.notes["forward"], rec.notes["backward"]
    n_t = len(fw["tangent_outputs"])
    if fw["n_inputs"] != n_runtime_inputs:
        raise Bypass("deduplicated_inputs")
    if bw["n_inputs"] != fw["n_saved"] + n_t:
        raise Bypass("backward_inputs")
    return {"mode": "training", "forward": rec.keys["forward"], "backward": rec.keys["backward"],
            "n_inputs": n_runtime_inputs, "n_outputs": fw["n_outputs"], "n_saved": fw["n_saved"],
            "grad_inputs": fw["grad_inputs"], "nondiff_outputs": fw["nondiff_outputs"],
            "tangent_outputs": fw["tangent_outputs"],
            "tangent_strides": bw["strides"][len(bw["strides"]) - n_t:] if n_t else []}


# -- the runtime wrapper ----------------------------------------------------------------------------
def inference_runner(fn: Callable, params_buffers: list[torch.Tensor], n_inputs: int,
                     n_outputs: int) -> Callable:
    """What AOTAutograd's runtime wrapper does for such a graph: prepend the module's params and
    buffers, run with grad mode off, return the outputs as a list."""
    def forward(*runtime_args: Any) -> list:
        args = [*params_buffers, *runtime_args]
        if len(args) != n_inputs:
            raise RuntimeError(f"compiled graph expects {n_inputs} inputs, got {len(args)}")
        grad = torch.is_grad_enabled()
        try:
            if grad:
                torch._C._set_grad_enabled(False)
            outs = fn(args)
        finally:
            if grad:
                torch._C._set_grad_enabled(True)
        outs = list(outs)
        if len(outs) != n_outputs:
            raise RuntimeError(f"compiled graph returned {len(outs)} outputs, expected {n_outputs}")
        return outs
    return forward


def _coerce(g: torch.Tensor, stride: list[int]) -> torch.Tensor:
    """A grad in the layout the backward graph was compiled for (AOTAutograd makes tangents
    contiguous the same way; a sum's grad, for one, arrives expanded with stride 0)."""
    if list(g.stride()) == stride:
        return g
    out = torch.empty_strided(g.shape, stride, dtype=g.dtype, device=g.device)
    out.copy_(g)
    return out


def training_runner(fw: Callable, bw: Callable, params_buffers: list[torch.Tensor], plan: dict) -> Callable:
    """AOTAutograd's training wrapper for a graph without mutations, aliasing, RNG or symbolic
    state: an autograd.Function whose forward runs the forward entry and saves its extra outputs,
    and whose backward runs the backward entry on them and the (re-laid-out) grads."""
    from torch.autograd.function import once_differentiable

    n_in, n_out, n_saved = plan["n_inputs"], plan["n_outputs"], plan["n_saved"]
    nondiff, tangents, strides = plan["nondiff_outputs"], plan["tangent_outputs"], plan["tangent_strides"]

    class CompiledFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, *args: Any) -> Any:
            outs = fw(list(args))
            if len(outs) != n_out + n_saved:
                raise RuntimeError(f"compiled forward returned {len(outs)} values, expected {n_out + n_saved}")
            user = tuple(outs[:n_out])
            ctx.save_for_backward(*[x.detach() if x._is_view() else x for x in outs[n_out:]])
            ctx.mark_non_differentiable(*[user[i] for i in nondiff])
            ctx._materialize_non_diff_grads = False
            return user

        @staticmethod
        @once_differentiable
        def backward(ctx: Any, *grads: Any) -> Any:
            ts = [_coerce(grads[i], s) for i, s in zip(tangents, strides)]
            return tuple(bw([*ctx.saved_tensors, *ts]))

    def forward(*runtime_args: Any) -> list:
        args = [*params_buffers, *runtime_args]
        if len(args) != n_in:
            raise RuntimeError(f"compiled graph expects {n_in} inputs, got {len(args)}")
        with torch.enable_grad():
            return list(CompiledFunction.apply(*args))
    return forward


def count_bypass(reason: str) -> None:
    _stats.count_cache("dynamo_bypasses", reason=reason)


def meta_for(gm: torch.fx.GraphModule, record: dict, elapsed: float, plan: dict, name: str) -> dict:
    ins = [i for i in record["inputs"] if "shape" in i]
    return {"graph_name": name, "kind": "dynamo", "summary": _summary(gm), "input_shapes": [i["shape"] for i in ins],
            "input_dtypes": [i["dtype"] for i in ins], "n_kernels": 0,
            "compile_seconds": round(elapsed, 6), "serves": [plan["forward"]] +
            ([plan["backward"]] if plan["backward"] else [])}


def _summary(gm: torch.fx.GraphModule) -> str:
    ops = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    names = sorted({qualified_name(n.target).split(".")[-1] for n in ops})
    return f"{len(ops)} torch ops: " + ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")


__all__ = ["Bypass", "Recording", "backward_compiled", "make_record", "note_key", "note_aten_graph", "plan_of",
           "inference_runner", "training_runner", "params_and_buffers", "count_bypass", "meta_for"]
