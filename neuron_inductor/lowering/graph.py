"""Lower a partitioned ATen graph to a host ``Program`` of kernel launches, views and fallbacks.

The groups come from the partitioner (``graph/fusion.py``; the pipeline runs it first). Each group
becomes one kernel. A group that cannot be lowered as formed (it does not fit SBUF in one
pass, a layout is not affine...) is split into single-op kernels; a single op that still cannot be
lowered becomes a *declared fallback*: run eagerly by the wrapper, logged and counted.
"""
from __future__ import annotations

import logging
import operator
import re
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from ..config import Config
from ..ir import Collective, Empty, Fallback, KernelCall, Program, Ref, TensorMeta, View, contiguous_strides
from ..ir.program import RngKey
from ..target import Target, get_target
from .builder import KernelBuilder
from .fused.group import Source
from .groups import Group, unmerge, val, view_root
from .layout import LoweringError, hw_dtype, meta_of, torch_dtype_name, word_scale
from .matmul.multi import mm_anchors
from .registry import KERNELS, VIEWS, KernelContext, find_lowering, takes_epilogue
from .user_kernel import emit_user_kernel, is_user_kernel_node

log = logging.getLogger("neuron_inductor")
aten = torch.ops.aten


#: larger tensor constants would bloat the generated wrapper; AOTAutograd lifts parameters as inputs
MAX_CONSTANT_NUMEL = 65536


class FallbackError(RuntimeError):
    """Raised with ``fallback="error"`` when an op would run eagerly instead of on Trainium."""


@dataclass
class LoweredGraph:
    program: Program
    groups: list[Group]
    fallbacks: list[tuple[str, str, str]] = field(default_factory=list)  # (op, shapes, reason)


def _gapless(m: TensorMeta) -> TensorMeta:
    """Kernel outputs are fresh buffers whose whole span must be written. A value whose layout has
    gaps (``aten.copy`` of a slice keeps the slice's strides: 8 of every 16 elements) gets contiguous
    strides instead; its consumers read it through the meta recorded here."""
    if m.numel == 0 or m.extent == m.numel:
        return m
    return TensorMeta(m.size, contiguous_strides(m.size), 0, m.dtype)


def _describe(n: fx.Node) -> str:
    v = val(n)
    shape = list(v.shape) if isinstance(v, torch.Tensor) else ""
    dt = str(v.dtype).replace("torch.", "") if isinstance(v, torch.Tensor) else ""
    args = ", ".join(a.name if isinstance(a, fx.Node) else repr(a) for a in n.args)
    return f"{n.name} = {n.target}({args}) -> {dt}{shape}"


def _shapes(n: fx.Node) -> str:
    parts = []
    for a in n.all_input_nodes:
        v = val(a)
        if isinstance(v, torch.Tensor):
            parts.append(f"{str(v.dtype).replace('torch.', '')}{list(v.shape)}")
    return ", ".join(parts)


def _view_of_dense(a: fx.Node, root: fx.Node, rm: TensorMeta) -> TensorMeta:
    """The layout of view ``a`` of ``root`` once ``root`` was given contiguous strides (see
    ``_gapless``): the traced strides describe the gapped layout, so the view chain is replayed on a
    meta tensor of the dense one. ``as_strided`` names absolute strides and cannot be replayed."""
    chain = []
    n = a
    while n is not root:
        chain.append(n)
        n = n.args[0]
    t = torch.empty(rm.storage_offset + rm.extent, dtype=val(root).dtype, device="meta").as_strided(
        rm.size, rm.stride, rm.storage_offset)
    for v in reversed(chain):
        rest = v.args[1:]
        if v.target is aten.as_strided.default or _has_node((rest, v.kwargs)):
            raise LoweringError(f"{a.name}: view of {root.name}, whose layout with gaps was made dense")
        t = v.target(t, *rest, **v.kwargs)
    if tuple(t.shape) != tuple(val(a).shape):
        raise LoweringError(f"{a.name}: view of {root.name} replayed on its dense layout gives {list(t.shape)}")
    return TensorMeta(tuple(t.shape), tuple(t.stride()), t.storage_offset(), rm.dtype)


def _has_node(args: object) -> bool:
    found = []
    fx.node.map_arg(args, lambda x: found.append(x))
    return bool(found)


class GraphLowering:
    def __init__(self, gm: fx.GraphModule, groups: list[Group], cfg: Config, name: str = "graph") -> None:
        self.gm = gm
        self.groups = groups
        self.cfg = cfg
        self.target: Target = get_target(cfg.target)
        self.name = name
        self.host: dict[fx.Node, str] = {}         # node -> host value name
        self.host_meta: dict[fx.Node, TensorMeta] = {}  # root node -> layout of its host buffer
        self.program: Program | None = None
        self.fallbacks: list[tuple[str, str, str]] = []
        self._n_kernels = 0
        self._n_vals = 0
        self._densified: set[fx.Node] = set()  # outputs whose gapped layout was made contiguous
        #: kernel results (buffers of their own, at offset 0) -> the storage offset of the traced
        #: value (``aten.copy`` of a slice keeps the slice's): views of them are placed relative to it
        self._traced_base: dict[fx.Node, int] = {}

    def _fresh(self, prefix: str) -> str:
        self._n_vals += 1
        return f"{prefix}{self._n_vals}"

    # --- sources -----------------------------------------------------------------------------
    def source(self, a: fx.Node) -> Source:
        root = view_root(a)
        if root not in self.host:
            raise LoweringError(f"{a.name}: producer {root.name} has no host value")
        rm = self.host_meta[root]
        m = meta_of(val(a))
        if root in self._densified:  # given contiguous strides (see _gapless): read it through those
            m = rm if a is root else _view_of_dense(a, root, rm)
            base = rm.storage_offset
        else:  # a kernel result's buffer starts at the value, wherever the traced value started
            base = self._traced_base.get(root, rm.storage_offset)
        rel = TensorMeta(m.size, m.stride, m.storage_offset - base, m.dtype)
        return Source(self.host[root], rel, rm.extent, rm.dtype)

    def host_value(self, a: fx.Node) -> str:
        """A host name holding ``a`` itself (a view step is emitted for views)."""
        if a in self.host:
            return self.host[a]
        root = view_root(a)
        src = self.source(a)
        name = self._fresh("v")
        self.program.steps.append(View(name, self.host[root], src.meta))  # offset relative to root's
        self.host[a] = name
        return name

    # --- driver ------------------------------------------------------------------------------
    def run(self) -> LoweredGraph:
        gm = self.gm
        inputs, metas = [], []
        for n in gm.graph.nodes:
            if n.op == "placeholder":
                name = f"arg{len(inputs)}"
                inputs.append(name)
                self.host[n] = name
                v = val(n)
                m = None
                if isinstance(v, torch.Tensor):
                    try:
                        m = meta_of(v)
                    except (TypeError, ValueError, RuntimeError):  # symbolic and unused (rng state)
                        m = None
                if m is not None:
                    self.host_meta[n] = m
                metas.append(m)
        self.program = Program(self.name, inputs, metas)
        for n in gm.graph.nodes:
            if n.op == "get_attr":
                value = getattr(gm, n.target)
                if not isinstance(value, torch.Tensor) or value.numel() > MAX_CONSTANT_NUMEL:
                    raise LoweringError(f"graph constant {n.target} is not a small tensor")
                cname = f"const{len(self.program.constants)}"
                self.program.constants[cname] = value
                self.host[n] = cname
                size = tuple(int(x) for x in value.shape)
                stride = tuple(int(x) for x in torch._prims_common.make_contiguous_strides_for(size))
                self.host_meta[n] = TensorMeta(size, stride, 0, str(value.dtype).replace("torch.", ""))
        groups = self.groups
        for g in groups:
            self.lower_group(g)
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        outs = []
        for o in out_node.args[0]:
            if isinstance(o, fx.Node):
                outs.append(Ref(self.host_value(o)))
            else:
                outs.append(o)
        self.program.outputs = outs
        return LoweredGraph(self.program, groups, self.fallbacks)

    def lower_group(self, g: Group) -> None:
        if g.kind == "fallback" and is_rng_key(g.nodes[0]):
            n, name = g.nodes[0], self._fresh("key")
            m = meta_of(val(n))
            self.program.steps.append(RngKey(name, m))
            self.host[n], self.host_meta[n] = name, m
            return
        if g.kind == "fallback":
            self.fallback(g.nodes[0], g.reason, collective=is_collective(g.nodes[0].target))
            return
        if g.kind == "kernel" and is_user_kernel_node(g.nodes[0]):
            try:
                emit_user_kernel(self, g.nodes[0])
            except LoweringError as e:
                self.fallback(g.nodes[0], str(e))
            return
        try:
            self.emit_kernel(g)
        except (LoweringError, NotImplementedError) as e:
            real = [n for n in g.nodes if n.target not in VIEWS and n.target is not operator.getitem]
            parts = unmerge(g)
            if len(parts) > 1:  # a merged group that does not fit: the groups it was merged from
                log.debug("unmerging group %s: %s", [n.name for n in real], e)
                for p in parts:
                    self.lower_group(p)
            elif len(real) > 1:
                log.debug("splitting group %s: %s", [n.name for n in real], e)
                for n in real:
                    self.lower_group(self._single(n))
            elif g.kind == "fused" and real[0].target in KERNELS:  # a scan a fused kernel could not hold
                self.lower_group(self._single(real[0]))
            else:
                self.fallback(real[0], str(e))

    def _single(self, n: fx.Node) -> Group:
        from .fused.group import reduce_dims
        from .registry import REDUCTIONS
        if n.target in REDUCTIONS:
            dims, _ = reduce_dims(n)
            return Group.fused([n], [n], tuple(val(n.args[0]).shape), frozenset(dims))
        if takes_epilogue(n.target):
            return Group.matmul([n], [n], tuple(val(n).shape))
        if n.target in KERNELS:
            return Group.kernel([n], [n])
        return Group.fused([n], [n], tuple(val(n).shape))

    # --- kernels -----------------------------------------------------------------------------
    def emit_kernel(self, g: Group) -> None:
        """One kernel launch for ``g``; a ``multi`` group (``graph/horizontal.py``) lowers each of its
        independent parts in a scope of its own inside the one kernel."""
        real = [n for n in g.nodes if n.target not in VIEWS]
        base = re.sub(r"\W", "_", "_".join(dict.fromkeys(
            str(n.target).split(".")[1] if "." in str(n.target) else n.name for n in real[:3])))
        kb = KernelBuilder(f"k{self._n_kernels}_{base}", self.target)
        kb.provenance = [_describe(n) for n in g.nodes]
        if g.kind == "multi":
            parts, plans = [], []
            for p in g.parts:
                with kb.loop(1, "affine", "part"):
                    part = self._lower_into(kb, p)
                plans.append(kb.plan)
                if part is not None:
                    parts.append(part)
            kb.plan = " | ".join(f"part {i}: {pl}" for i, pl in enumerate(plans))
        else:
            part = self._lower_into(kb, g)
            parts = [part] if part is not None else []
        if parts:
            self._launch(kb, parts)

    def _lower_into(self, kb: KernelBuilder, g: Group):
        """Emit ``g``'s body into ``kb``: (the group's outputs, the ones given fresh buffers, their
        layouts), or None when nothing leaves it (empty outputs are host ``Empty`` steps)."""
        outs = [o for o in g.outputs]
        sources = {}
        for n in g.nodes:
            for a in n.all_input_nodes:
                if a not in g.members:
                    sources[a] = self.source(a)
        out_tensors, out_meta, results, empties = {}, {}, [], []
        for o in outs:
            m = _gapless(meta_of(val(o)))
            if m.stride != meta_of(val(o)).stride:
                self._densified.add(o)
            if o.target is aten.copy_.default:
                dst = self.source(o.args[0])
                out_tensors[o] = kb.param(dst.host, dst.base_extent * word_scale(dst.base_dtype),
                                          hw_dtype(dst.base_dtype), "inout")
                out_meta[o] = dst.meta
                continue
            if m.numel == 0:
                empties.append((o, m))
                continue
            out_tensors[o] = kb.output(m.extent * word_scale(m.dtype), hw_dtype(m.dtype))
            out_meta[o] = TensorMeta(m.size, m.stride, 0, m.dtype)
            results.append(o)
        for o, m in empties:
            name = self._fresh("e")
            self.program.steps.append(Empty(name, TensorMeta(m.size, m.stride, 0, m.dtype)))
            self.host[o], self.host_meta[o] = name, TensorMeta(m.size, m.stride, 0, m.dtype)
        if not out_tensors:
            return None
        if any(math_numel(val(a)) == 0 for a in sources if isinstance(val(a), torch.Tensor)):
            raise LoweringError("an operand has no elements (a kernel never takes an empty tensor)")
        if g.kind == "fused":
            if any(math_numel(val(n)) == 0 for n in g.nodes if isinstance(val(n), torch.Tensor)):
                raise LoweringError("empty iteration domain")
            key = "fused"
        elif g.kind == "matmul" and len(mm_anchors(g)) > 1:  # sibling GEMMs sharing an epilogue
            key = "matmul_multi"
        elif g.kind == "matmul" and g.reduce_axes:  # a GEMM inside a row-reducing fused kernel
            key = "matmul_rows"
        elif g.kind == "matmul" and any(view_root(m.args[0]) in g.members for m in mm_anchors(g)):
            key = "matmul_prologue"  # a GEMM whose lhs its fused part computes row by row
        else:  # a kernel of its own, or one with an epilogue (matmul)
            key = None
        n = g.nodes[0] if key else next(m for m in g.nodes if m.target in KERNELS)
        find_lowering(key or n.target).lower(
            KernelContext(n, g, sources, out_tensors, out_meta, kb, self.cfg, self.target))
        return outs, results, out_meta

    def _launch(self, kb: KernelBuilder, parts: list) -> None:
        """Finish ``kb`` and append its launch; its outputs become host values."""
        kernel = kb.finish()  # the pipeline's verify stage checks it with the whole program
        self._n_kernels += 1
        args = [p.host_name for p in kernel.params]
        names, metas = [], []
        for outs, results, out_meta in parts:
            for o in results:
                name = self._fresh("buf")
                names.append(name)
                self.host[o] = name
                self.host_meta[o] = out_meta[o]
                self._traced_base[o] = int(val(o).storage_offset())
                metas.append(out_meta[o])
            # mutated inputs come back too; their host name stays the input's
            for o in outs:
                if o.target is aten.copy_.default:
                    root = view_root(o.args[0])
                    self.host[o] = self.host[root]
                    self.host_meta[o] = self.host_meta[root]
        inout = [p for p in kernel.params if p.kind == "inout"]
        names += [self._fresh("_mut") for _ in inout]
        metas += [self.host_meta_of(p.host_name) for p in inout]
        self.program.steps.append(KernelCall(kernel, args, names, metas))

    def host_meta_of(self, host: str) -> TensorMeta:
        for n, h in self.host.items():
            if h == host and n in self.host_meta:
                m = self.host_meta[n]
                return TensorMeta((m.extent,), (1,), 0, m.dtype)
        raise KeyError(host)

    # --- fallbacks ---------------------------------------------------------------------------
    def fallback(self, n: fx.Node, reason: str, collective: bool = False) -> None:
        """A host call of ``n``'s op: a declared fallback, or (``collective``) a declared collective,
        which is how communication runs and so neither an error nor a counted fallback."""
        op = str(n.target)
        shapes = _shapes(n)
        if collective:
            pass
        elif self.cfg.fallback == "error":
            raise FallbackError(f"neuron_inductor: no Trainium lowering for {op}({shapes}): {reason}. "
                                "Set options={'fallback': 'warn'} to run it eagerly instead.")
        else:
            self.fallbacks.append((op, shapes, reason))

        def conv(a):
            if isinstance(a, fx.Node):
                return Ref(self.host_value(a))
            if isinstance(a, (list, tuple)):
                return type(a)(conv(x) for x in a)
            return a
        args = tuple(conv(a) for a in n.args)
        kwargs = {k: conv(v) for k, v in n.kwargs.items()}
        v = val(n)
        if isinstance(v, (list, tuple)):
            results = [self._fresh("cc" if collective else "fb") for _ in v]
            for u in n.users:
                if u.target is operator.getitem:
                    i = u.args[1]
                    self.host[u] = results[i]
                    if isinstance(v[i], torch.Tensor):
                        self.host_meta[u] = meta_of(v[i])
            unpack = True
        else:
            results = [self._fresh("cc" if collective else "fb")]
            self.host[n] = results[0]
            if isinstance(v, torch.Tensor):
                self.host_meta[n] = meta_of(v)
            unpack = False
        if collective:
            self.program.steps.append(Collective(results, _qualname(n.target), args, kwargs, unpack))
            return
        metas = v if isinstance(v, (list, tuple)) else [v]
        dtypes = tuple(torch_dtype_name(t.dtype) if isinstance(t, torch.Tensor) else None for t in metas)
        self.program.steps.append(Fallback(results, _qualname(n.target), args, kwargs, reason,
                                           shapes, unpack, dtypes))


#: torch's functional collectives (DDP/FSDP2/DTensor graphs): run on the host's process group
COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d_functional")


def is_collective(target) -> bool:
    return isinstance(target, torch._ops.OpOverload) and target.namespace in COLLECTIVE_NAMESPACES


#: int32 words up to which an ``aten.randint`` is a random-stream key drawn on the host (RngKey)
RNG_KEY_NUMEL = 2


def is_rng_key(n: fx.Node) -> bool:
    """A draw of a few int32 words from torch's default generator (the key of the counter-based
    stream of graph/decompositions_random.py): a host generator step, not a fallback."""
    v = val(n)
    return n.target is aten.randint.low and isinstance(v, torch.Tensor) and v.dtype == torch.int32 \
        and 0 < v.numel() <= RNG_KEY_NUMEL and "generator" not in n.kwargs


def math_numel(v) -> int:
    n = 1
    for s in v.shape:
        n *= int(s)
    return n


def _qualname(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        ns = target.namespace
        return f"{ns}.{target._schema.name.split('::')[1]}.{target._overloadname}"
    return f"{target.__module__}.{target.__name__}"


def lower_graph(gm: fx.GraphModule, groups: list[Group], cfg: Config, name: str = "graph") -> LoweredGraph:
    """Lower ``gm`` as partitioned into ``groups`` (``graph.fusion.partition``, in its order).

    ``neuron_inductor.pipeline.partition_and_lower(gm, cfg, name)`` partitions and lowers in one call."""
    if isinstance(groups, Config):
        raise TypeError("lower_graph(gm, groups, cfg, name) takes the partitioner's groups; "
                        "neuron_inductor.pipeline.partition_and_lower(gm, cfg, name) does both")
    return GraphLowering(gm, groups, cfg, name).run()
