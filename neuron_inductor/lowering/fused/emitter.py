"""Emit a fused pointwise/reduction group as one kernel, following its tile plan.

The plan (``tiling.plan_tiles``: domain, merged axes, partition/free axes, loops, chunking,
every access's strides) is computed first and never changes; :class:`FusedEmitter` walks it, holding
the loop state explicitly (``LoopState``: loop variables, row tile, free chunk and their extents).

Per iteration: load leaves (DMA with access patterns), run each node's lowering, reduce along the free
axis (VectorE ``tensor_reduce``, accumulating across chunks), store outputs. A reduction over every axis
puts one reduced axis on partitions and finishes with a TensorE transpose.

*Column sums* (``col_axes``: every axis but ``F`` summed, a norm's weight gradient) accumulate across
row tiles on TensorE (``partition_ops.ColumnSums``) in the same single pass as the row work, and the
values computed from them (column vectors) run once after the loops. Leaves constant along every loop
axis (a norm's weight) are loaded once before the loops as one row and broadcast to the partitions on
TensorE, so each HBM byte is read once per kernel.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import sympy
import torch
import torch.fx as fx

from ...ir import HBMAccess, TileRegion
from .. import integers
from ..builder import KernelBuilder, TVal
from .ctx import FusedCtx, LoopState
from .group import FusedGroup, Source, builder_restore, builder_snapshot, reduce_dims, sbuf_peak
from .variants import plan_variants
from ..engine_balance import lighter_engine
from .scan import open_carries, scan_node
from .tiling import TilePlan, plan_tiles
from ..layout import LoweringError, hw_dtype, word_scale
from ..loops import nest, tiles
from ..partition_ops import FLOATS, ColumnSums, broadcast_partitions
from ..pointwise import copy, scalar_op, tile_dtype
from ..registry import ORDER_PRESERVING_VIEWS, POINTWISE, REDUCTIONS, KernelContext, register_lowering
from ..transpose import tensor_transpose

EXPAND = torch.ops.aten.expand.default


def _count_tile(n: fx.Node, v, remaining: dict, refs: dict, pinned: set) -> None:
    """Count ``n``'s value in its tile's references, or pin the tile when the pass does not count
    ``n``'s uses (its tile must then outlive every view that shares it)."""
    if v is None or v.region is None:
        return
    if n in remaining:
        refs[v.region.tile] = refs.get(v.region.tile, 0) + 1
    else:
        pinned.add(id(v.region.tile))


class FusedEmitter:
    """Emits the instructions of one fused kernel from its (immutable) tile plan ``tp``.

    ``at`` is where the emission is in the loop nest; ``vals`` the values of the current pass.
    The matmul epilogue drives one with its own loops (it sets ``at`` and calls ``eval``)."""

    def __init__(self, tp: TilePlan, sources: dict[fx.Node, Source], kb: KernelBuilder,
                 out_tensors: dict, out_meta: dict) -> None:
        self.tp = tp
        self.g = tp.group
        self.sources = sources
        self.kb = kb
        self.out_tensors, self.out_meta = out_tensors, out_meta
        self.pmax = kb.target.partitions
        self.at = LoopState(cols=sympy.Integer(tp.fc))
        self.vals: dict[fx.Node, TVal] = {}
        self.hoisted: dict[tuple, TVal] = {}
        self.colsums: ColumnSums | None = None
        #: scans' running values between chunks (``_open_carries``), and the column of this row
        self.carries: dict = {}
        self.carry_col: sympy.Expr = sympy.Integer(0)
        self.ones = None
        self.row_loop = "affine"
        #: called at the top of each iteration of the outer loops, before its row tiles: what one
        #: outer iteration shares is loaded there (``matmul/rows.py``: a batched GEMM's rhs)
        self.on_outer = None
        self.ctx = FusedCtx(self)

    # --- expressions -------------------------------------------------------------------------
    def offset_expr(self, st: Sequence[int]) -> sympy.Expr:
        tp, at = self.tp, self.at
        e = sympy.Integer(0)
        for a, var in at.loop_vars.items():
            e += st[a] * var
        if tp.P is not None:
            e += st[tp.P] * self.pmax * at.ip
        if tp.F is not None:
            e += st[tp.F] * tp.fc * at.fcv
        return e

    # --- emission ----------------------------------------------------------------------------
    def emit(self) -> None:
        kb, tp = self.kb, self.tp
        kb.plan = tp.describe(self.pmax)
        self.hoist()
        if tp.scans:  # the scans' multiplicand (``r[i] = 1 * r[i-1] + x[i]``)
            self.ones = kb.tile((self.pmax, tp.fc), "float32", prefix="ones")
            kb.memset(self.ones.full(), 1.0)
        if tp.col_reds:
            kb.plan += f"; column sums of {[r.name for r in tp.col_reds]} on TensorE"
        if self.hoisted:
            kb.plan += f"; {len(self.hoisted)} row-invariant leaf load(s) hoisted"
        self._loops()
        if tp.col_reds:
            self._finish_columns()
        if tp.single:
            _check_sbuf(kb, tp.fsize)

    # --- loads hoisted out of the loops, column sums ------------------------------------------
    def hoist(self) -> None:
        """Before the loops: allocate column-sum accumulators and load every leaf that no loop
        moves (stride 0 along all loop axes) once, broadcasting it across partitions on TensorE.
        A subclass loads here what else the whole kernel keeps (``matmul/rows.py``: the rhs)."""
        kb, tp, pmax = self.kb, self.tp, self.pmax
        self.at = LoopState(cols=sympy.Integer(tp.fc))
        loop_axes = tp.loop_axes
        todo: dict[tuple, tuple[fx.Node, list[int]]] = {}
        if tp.nchunks == 1 and tp.P is not None and tp.psize > 1:
            for (n, a), st in tp.loads.items():
                if n not in tp.col_post and all(st[x] == 0 for x in loop_axes):
                    todo.setdefault(tp.load_key(a, st), (a, st))
        floats = [k for k, (a, st) in todo.items()
                  if hw_dtype(self.sources[a].base_dtype) in FLOATS]
        if tp.col_reds:
            self.colsums = ColumnSums(kb, tp.col_reds, tp.fc, 1 if floats else 0)
            dts = {"float32"} | {hw_dtype(self.sources[a].base_dtype) for (_, a) in tp.loads} | \
                {hw_dtype(str(n.meta["val"].dtype).replace("torch.", "")) for n in self.g.nodes
                 if isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].dtype.is_floating_point}
            for dt in sorted(dts & set(FLOATS)):
                self.colsums.ones(dt)
            self.row_loop = self.colsums.loop_kind
        scratch = kb.tile((pmax, kb.target.psum_bank_fp32), "float32", "psum", prefix="bc") \
            if floats else None
        ones_rows: dict[str, object] = {}
        for key, (a, st) in todo.items():
            src = self.sources[a]
            full = st[tp.F] != 0
            acc = self._access(src.host, src.base_extent, src.base_dtype, src.meta.storage_offset, st,
                               full)
            cols = tp.fc if full else 1
            dt = acc.tensor.dtype
            if key not in floats:  # integers: one broadcast DMA per word, hoisted out of the loops
                words = []
                for w in ([0, 1] if src.base_dtype == "int64" else [0]):
                    wacc = acc if w == 0 else self._access(src.host, src.base_extent, src.base_dtype,
                                                           src.meta.storage_offset, st, full, word=1)
                    t = kb.tile((pmax, cols), dt, prefix="hoist")
                    pat = ((0, pmax),) + tuple(wacc.pattern[1:])
                    kb.dma(t.region(pmax, cols), type(wacc)(wacc.tensor, wacc.offset, pat))
                    words.append(t)
                self.hoisted[key] = TVal("full" if full else "row", words[0].full(),
                                         hi=words[1].full() if len(words) > 1 else None,
                                         bound=1 if src.meta.dtype == "bool" else None)
                continue
            row = kb.tile((1, cols), dt, prefix="row")
            kb.dma(row.region(1, cols), acc)
            if dt not in ones_rows:
                ones_rows[dt] = kb.tile((1, pmax), dt, prefix="ones_row")
                kb.memset(ones_rows[dt].full(), 1.0)
            t = broadcast_partitions(kb, row.region(1, cols), cols, scratch, ones_rows[dt])
            self.hoisted[key] = TVal("full" if full else "row", t.full())

    def _col_add(self, n: fx.Node, loads) -> None:
        x = self._arg(n, n.args[0], loads)
        if not n.args[0].meta["val"].dtype.is_floating_point:
            _check_int_reduction(self.tp, n, x, "add")
        if x.kind != "full":
            x = copy(self.ctx, x, "float32", "full")
        later = sympy.Gt(sympy.Add(self.at.ip, *self.at.loop_vars.values()), 0)  # loop vars are >= 0
        self.colsums.add(n, x.region, self.at.rows, later if later not in (sympy.true, sympy.false)
                         else bool(later))

    def _finish_columns(self) -> None:
        """After the row loops: the column sums, then the column-vector values computed from them
        (one row, no partition axis)."""
        tp = self.tp
        self.at = LoopState(rows=sympy.Integer(1), cols=sympy.Integer(tp.fsize))
        self.tp = replace(tp, P=None)
        self.vals = {}
        for r in tp.col_reds:
            self.vals[r] = _finish_reduction(self.ctx, self.tp, r, TVal("full", self.colsums.result(r)))
            if r in self.g.outputs:
                self._store(r, self.vals[r])
        loads: dict = {}
        for n in self.g.nodes:
            if n not in tp.col_post:
                continue
            self.vals[n] = self._compute(n, loads)
            if n in self.g.outputs:
                self._store(n, self.vals[n])
        self.tp = tp

    # --- loops -------------------------------------------------------------------------------
    def _loops(self) -> None:
        """Outer loops, then row tiles; inside, sequential reduction loops and free-axis chunks."""
        tp, at, pmax = self.tp, self.at, self.pmax
        with nest(self.kb, [tp.D[a] for a in tp.outer], self.row_loop, "l") as lv:
            at.loop_vars.update(zip(tp.outer, lv))
            if self.on_outer is not None:
                self.on_outer()
            if tp.p_reduced:
                at.rows = sympy.Integer(min(pmax, tp.psize))
                accs = self._init_accs()
                with tiles(self.kb, tp.psize, pmax, "sequential", "p") as (at.ip, at.rows):
                    self._chunks(accs)
                self._finish_partition_reduce(accs)
                return
            with tiles(self.kb, tp.psize, pmax, self.row_loop, "p") as (at.ip, at.rows):
                if tp.kept_free:
                    kept_free_chunks(self)
                    return
                accs = self._init_accs()
                self.vals = {}
                self._chunks(accs)
                self._post(accs)

    def _init_accs(self) -> dict[fx.Node, TVal]:
        accs = {}
        if not self.tp.accumulate:
            return accs
        for r in self.tp.reductions:
            op, init = REDUCTIONS[r.target]
            t = self.kb.tile((self.pmax, 1), tile_dtype(r.meta["val"]) if op != "add" else "float32",
                             prefix="acc")
            reg = t.region(self.pmax, 1)
            self.kb.memset(reg, init)
            accs[r] = TVal("row", reg)
        return accs

    def _chunks(self, accs) -> None:
        tp, at = self.tp, self.at
        with nest(self.kb, [tp.D[a] for a in tp.seq], "sequential", "r") as rv:
            at.loop_vars.update(zip(tp.seq, rv))
            open_carries(self, 1)
            kind = "sequential" if tp.reductions or tp.scans else "affine"
            with tiles(self.kb, tp.fsize, tp.fc, kind, "f") as (at.fcv, at.cols):
                self.vals = {}
                self.eval(pre_only=tp.accumulate, accs=accs)
        at.fcv = sympy.Integer(0)

    def _post(self, accs) -> None:
        if self.tp.accumulate:
            self.vals = {r: TVal("row", TileRegion(a.region.tile, a.region.starts, (self.at.rows, 1)))
                         for r, a in accs.items()}
            for r in self.tp.reductions:
                self.vals[r] = _finish_reduction(self.ctx, self.tp, r, self.vals[r])
                if r in self.g.outputs:
                    self._store(r, self.vals[r])
            self.eval(post_only=True, accs=accs)

    def _finish_partition_reduce(self, accs) -> None:
        kb, tp, pmax = self.kb, self.tp, self.pmax
        self.at.rows = sympy.Integer(1)
        self.vals = {}
        for r in tp.reductions:
            op = REDUCTIONS[r.target][0]
            acc = accs[r].region
            if acc.dtype != "float32":  # nc_transpose keeps its input's dtype; integer partials
                f = kb.tile(tuple(int(s) for s in acc.tile.shape), "float32", prefix="accf")
                kb.copy("vector", f.full(), acc.tile.full())  # (proven below 2**24) widen exactly
                acc = TileRegion(f, acc.starts, acc.sizes)
            tpt = kb.tile((1, pmax), "float32", "psum", prefix="tp")
            tensor_transpose(kb, tpt.full(), acc)
            red = kb.tile((1, 1), "float32", prefix="red")
            kb.tensor_reduce(red.full(), data=tpt.full(), op=op, axis=(1,), negate=False, keepdims=True)
            self.vals[r] = _finish_reduction(self.ctx, self.tp, r, TVal("row", red.full()))
            if r in self.g.outputs:
                self._store(r, self.vals[r])
        self.at.ip = sympy.Integer(0)
        self.tp = replace(tp, P=None)  # one row left: no partition axis
        self.eval(post_only=True, accs=accs)
        self.tp = tp

    # --- node evaluation ---------------------------------------------------------------------
    def _pass_nodes(self, pre_only: bool, post_only: bool) -> list[fx.Node]:
        out = []
        for n in self.g.nodes:
            if n in self.tp.col_post:
                continue
            if n in self.tp.seeded:
                out.append(n)
            elif pre_only and n in self.tp.post:
                continue
            elif post_only and (n not in self.tp.post or n in self.vals):
                continue
            else:
                out.append(n)
        return out

    def _release_dead(self, n: fx.Node, remaining: dict, refs: dict, loads: dict,
                      pinned: set) -> None:
        """Recycle the tiles of values whose last use in this pass was ``n``. A tile that also holds
        a cached leaf load stays: a member computed through a view of a leaf (``clone(x[:, ::2])``)
        shares the load's tile, and later readers of the leaf get that cached tile. So does a tile
        in ``pinned``: it holds a value this pass does not count (a reduction, a value the post
        pass reads), and a view of that value shares it (``amax(x, 1).unsqueeze(1)``)."""
        held = {id(v.region.tile) for v in loads.values() if v.region is not None} | pinned
        for a in dict.fromkeys(n.all_input_nodes):  # in argument order: a deterministic pool
            if a not in remaining:
                continue
            remaining[a] -= n.all_input_nodes.count(a) and 1
            if remaining[a] == 0 and a not in self.g.outputs:
                v = self.vals.get(a)
                if v is not None and v.region is not None:
                    t = v.region.tile
                    refs[t] = refs.get(t, 1) - 1
                    if refs[t] == 0 and id(t) not in held:
                        self.kb.release(t)

    def eval(self, accs, pre_only: bool = False, post_only: bool = False) -> None:
        loads: dict[tuple, TVal] = {}
        nodes = self._pass_nodes(pre_only, post_only)
        later = set(self.g.nodes) - set(nodes) if pre_only else set()
        remaining: dict = {}
        for n in nodes:
            for a in set(n.all_input_nodes):
                if a in self.tp.members and a not in later and a not in self.tp.reductions:
                    remaining[a] = remaining.get(a, 0) + 1
        for n in self.g.nodes:
            if any(u in later for u in n.users):
                remaining.pop(n, None)  # needed by the post pass: keep
        # A tile's count is the number of live values in it (views share their base's tile);
        # values computed before this pass (seeded, or by the pre pass) count from the start.
        refs: dict = {}
        pinned: set = set()  # ids of tiles holding values ``remaining`` does not count
        for a, v in self.vals.items():
            _count_tile(a, v, remaining, refs, pinned)
        for n in self.g.nodes:
            is_post = n in self.tp.post
            if n in self.tp.col_post:
                continue
            if n in self.tp.seeded:
                if n in self.g.outputs:
                    self._store(n, self.vals[n])
                continue
            if pre_only and is_post:
                continue
            if post_only and (not is_post or n in self.vals):
                continue
            if self.tp.empty and n not in self.tp.post and n not in self.tp.reductions:
                continue  # a value over the empty domain: never needed
            if n in self.tp.col_reds:
                self._col_add(n, loads)
            elif n in self.tp.scans:
                self.vals[n] = scan_node(self, n, self._arg(n, n.args[0], loads))
            elif n.target in REDUCTIONS:
                self.vals[n] = self._reduce(n, accs, loads)
            else:
                self.vals[n] = self._compute(n, loads)
            if n in self.g.outputs and n not in self.tp.col_reds and \
                    not (n in self.tp.reductions and self.tp.accumulate):
                self._store(n, self.vals[n])
            _count_tile(n, self.vals.get(n), remaining, refs, pinned)
            self._release_dead(n, remaining, refs, loads, pinned)

    def _compute(self, n: fx.Node, loads) -> TVal:
        """The value of a view or pointwise node from its arguments' values."""
        if n.target in ORDER_PRESERVING_VIEWS or n.target is EXPAND:
            return self._arg(n, n.args[0], loads)  # an expand reads the same tile along the broadcast
        fn = POINTWISE.get(n.target)
        if fn is None:  # e.g. a permute in a sibling-GEMM epilogue: the group is split instead
            raise LoweringError(f"{n.target} is not computed inside a fused kernel")
        skip0 = n.target is torch.ops.aten.copy_.default  # destination: written, not read
        args = [None if (skip0 and i == 0) else self._arg(n, a, loads) for i, a in enumerate(n.args)]
        kwargs = {k: self._arg(n, v, loads) for k, v in n.kwargs.items()}
        try:
            return self.ctx.call(fn, n, *args, **kwargs)
        except NotImplementedError as e:
            raise LoweringError(f"{n.target}: {e}") from None

    def _arg(self, consumer: fx.Node, a, loads):
        if isinstance(a, fx.Node):
            if a in self.tp.members:
                return self.vals[a]
            return self._load(consumer, a, loads)
        if isinstance(a, (int, float, bool)) and not isinstance(a, torch.dtype):
            return TVal.const(a)
        return a

    def _reduce(self, n: fx.Node, accs, loads) -> TVal:
        op, init = REDUCTIONS[n.target]
        if self.tp.empty:  # over no elements: the identity (mean: 0 / 0)
            if n.target._overloadpacket is torch.ops.aten.mean:
                return TVal.const(math.nan)
            return TVal.const(init if n.meta["val"].dtype.is_floating_point else int(init))
        x = self._arg(n, n.args[0], loads)
        if not n.args[0].meta["val"].dtype.is_floating_point:
            _check_int_reduction(self.tp, n, x, op)
        if x.kind != "full":
            x = copy(self.ctx, x, "float32", "full")
        if self.tp.kept_free and self.tp.slots:  # this row's own slot, combined after the loop
            acc = accs[n].region
            slot = TileRegion(acc.tile, (acc.starts[0], self.carry_col * self.tp.fc), acc.sizes)
            self.kb.copy(lighter_engine(self.ctx), slot, x.region)
            return accs[n]
        if self.tp.kept_free:  # the free axis is kept: fold this slice in element-wise
            self.kb.tensor_tensor(accs[n].region, data1=accs[n].region, data2=x.region, op=op)
            return accs[n]
        dt = "float32" if op == "add" else x.dtype
        part = self.ctx.new("row", dt)
        self.kb.tensor_reduce(part, data=x.region, op=op, axis=(1,), negate=False, keepdims=True)
        if self.tp.accumulate:
            acc = accs[n].region
            accr = TileRegion(acc.tile, acc.starts, (self.at.rows, 1))
            self.kb.tensor_tensor(accr, data1=accr, data2=part, op=op)
            return accs[n]
        return _finish_reduction(self.ctx, self.tp, n, TVal("row", part))

    def _access(self, host: str, numel: int, dtype_name: str, offset0: int, st: Sequence[int],
                full: bool, kind: str = "input", word: int = 0) -> HBMAccess:
        scale = word_scale(dtype_name)
        hw = hw_dtype(dtype_name)
        if kind == "output":
            t = host  # an HBMTensor already
        else:
            t = self.kb.param(host, numel * scale, hw, kind)
        off = (offset0 + self.offset_expr(st)) * scale + word
        prow = st[self.tp.P] * scale if self.tp.P is not None else 0
        rows = self.at.rows if self.tp.P is not None else 1
        pat = ((prow, rows), (st[self.tp.F] * scale if full else 1, self.at.cols if full else 1))
        return HBMAccess(t, sympy.expand(off), pat)

    def _load(self, consumer: fx.Node, a: fx.Node, loads) -> TVal:
        st = self.tp.loads[(consumer, a)]
        key = self.tp.load_key(a, st)
        if key in loads:
            return loads[key]
        if key in self.hoisted:
            hv = self.hoisted[key]
            h = hv.region

            def cut(r):
                return None if r is None else \
                    TileRegion(r.tile, r.starts, (self.at.rows, self.at.cols if h.sizes[1] != 1 else 1))
            loads[key] = TVal(hv.kind, cut(h), hi=cut(hv.hi), bound=hv.bound)
            return loads[key]
        src = self.sources[a]
        full = self.tp.F is not None and st[self.tp.F] != 0
        kind = "full" if full else "row"
        words = []
        for w in ([0, 1] if src.base_dtype == "int64" else [0]):  # int64: both words
            acc = self._access(src.host, src.base_extent, src.base_dtype, src.meta.storage_offset, st,
                               full, word=w)
            dst = self.ctx.new(kind, acc.tensor.dtype)
            self.kb.dma(dst, acc)
            words.append(dst)
        loads[key] = TVal(kind, words[0], hi=words[1] if len(words) > 1 else None,
                          bound=1 if src.meta.dtype == "bool" else None)
        return loads[key]

    def _store(self, n: fx.Node, v: TVal) -> None:
        st = self.tp.stores[n]
        out = self.out_tensors[n]
        meta = self.out_meta[n]
        full = self.tp.F is not None and st[self.tp.F] != 0
        kind = "full" if full else "row"
        hw = hw_dtype(meta.dtype)
        if v.kind != kind or v.kind == "scalar" or (meta.dtype == "bool" and v.dtype != "uint8"):
            v = copy(self.ctx, v, hw if v.kind == "scalar" else v.dtype, kind) \
                if meta.dtype != "bool" else scalar_op(self.ctx, copy(self.ctx, v, "float32", kind),
                                                       "not_equal", 0, "uint8")
        words = [0, 1] if meta.dtype == "int64" else [0]
        for w in words:
            src = v.region
            if w == 1:  # high word of an int64: its own, or the sign of the low word
                src = v.hi if v.hi is not None else \
                    scalar_op(self.ctx, v, "less", 0, "int32", "multiply", -1).region
            acc = self._access(out, 0, meta.dtype, 0, st, full, "output", w)
            self.kb.dma(acc, src)



def kept_free_chunks(em: FusedEmitter) -> None:
    """Per free chunk: element-wise accumulators, the reduced axes as sequential loops, then the
    values computed from the reductions and the stores (plan ``kept_free``)."""
    tp, at, kb = em.tp, em.at, em.kb
    open_carries(em, math.prod(tp.D[a] for a in tp.seq))
    with tiles(kb, tp.fsize, tp.fc, "sequential" if tp.scans else "affine", "f") as (at.fcv, at.cols):
        accs, nseq = {}, math.prod(tp.D[a] for a in tp.seq)
        for r in tp.reductions:
            op, init = REDUCTIONS[r.target]
            t = kb.tile((em.pmax, tp.fc * (nseq if tp.slots else 1)),
                        "float32" if op == "add" else tile_dtype(r.meta["val"]), prefix="acc")
            if not tp.slots:  # (slots: every one is written before it is read)
                kb.memset(t.region(at.rows, at.cols), init)
            accs[r] = TVal("full", t.region(at.rows, at.cols))
        with nest(kb, [tp.D[a] for a in tp.seq], "affine" if tp.slots else "sequential", "r") as rv:
            at.loop_vars.update(zip(tp.seq, rv))
            em.carry_col = sum((v * math.prod(tp.D[b] for b in tp.seq[i + 1:]) for i, v in enumerate(rv)),
                               sympy.Integer(0))
            em.vals = {}
            em.eval(pre_only=True, accs=accs)
        em.carry_col = sympy.Integer(0)
        at.loop_vars.update({a: sympy.Integer(0) for a in tp.seq})  # the post pass reads no reduced axis
        em.vals = {}
        for r in tp.reductions:
            if tp.slots:
                combine_slots(kb, accs[r].region, nseq, tp.fc, REDUCTIONS[r.target][0])
            em.vals[r] = _finish_reduction(em.ctx, tp, r, accs[r])
            if r in em.g.outputs:
                em._store(r, em.vals[r])
        em.eval(post_only=True, accs=accs)
    at.fcv = sympy.Integer(0)


def combine_slots(kb: KernelBuilder, acc: TileRegion, n: int, width: int, op: str) -> None:
    """Fold slots ``1..n-1`` (each ``width`` columns apart) of ``acc`` into slot 0 as a pairwise tree:
    ``ceil(log2 n)`` dependent steps instead of ``n - 1``."""
    while n > 1:
        h = (n + 1) // 2
        for i in range(n - h):
            a = TileRegion(acc.tile, (acc.starts[0], i * width), acc.sizes)
            b = TileRegion(acc.tile, (acc.starts[0], (i + h) * width), acc.sizes)
            kb.tensor_tensor(a, data1=a, data2=b, op=op)
        n = h


def _finish_reduction(ctx: FusedCtx, tp: TilePlan, r: fx.Node, v: TVal) -> TVal:
    """A reduction's final value from its accumulated one (a mean divides the sum by its count)."""
    if r.target._overloadpacket is torch.ops.aten.mean:
        count = math.prod(tp.D0[a] for a in reduce_dims(r)[0])
        return scalar_op(ctx, v, "multiply", 1.0 / count, "float32")
    return v


def _check_sbuf(kb: KernelBuilder, fsize: int) -> None:
    """A single pass holds whole rows: the tiles it allocated must fit SBUF."""
    need, have = sbuf_peak(kb.body), kb.target.sbuf_bytes_per_partition
    if need > have:
        raise LoweringError(f"rows of {fsize} elements need {need} SBUF bytes per partition in "
                            f"one pass; {have} exist")


def _check_int_reduction(tp: TilePlan, n: fx.Node, x: TVal, op: str) -> None:
    """Reductions run in fp32: an integer one is lowered only when every partial result is an
    exact fp32 integer (|x| * count < 2**24); otherwise the node is a declared fallback."""
    b = integers.bound(x)
    count = math.prod(tp.D0[a] for a in reduce_dims(n)[0]) if op in ("add", "multiply") else 1
    limit = b ** count if op == "multiply" and b is not None and count < 64 else \
        (None if b is None or op == "multiply" and count >= 64 else b * count)
    if limit is None or limit >= integers.EXACT:
        raise LoweringError(f"{n.target}: integer reduction over values not proven below 2**24 "
                            "(fp32 accumulation would round)")

def lower_fused(group: FusedGroup, sources: dict[fx.Node, Source], kb: KernelBuilder,
                out_tensors: dict, out_meta: dict, free_chunk: int) -> None:
    """Emit the kernel body for ``group`` into ``kb``. ``out_tensors[n]`` are the HBM outputs."""
    *preferred, (last, kw) = plan_variants(group)
    for g, pkw in preferred:
        snap = builder_snapshot(kb)
        try:
            return _emit(g, sources, kb, out_tensors, out_meta, free_chunk, pkw)
        except LoweringError:
            builder_restore(kb, snap)
    _emit(last, sources, kb, out_tensors, out_meta, free_chunk, kw)


@register_lowering("fused", kind="group")
def lower_fused_group(ctx: KernelContext) -> None:
    lower_fused(ctx.group, ctx.sources, ctx.builder, ctx.outputs, ctx.out_meta, ctx.config.free_chunk)


def _emit(group: FusedGroup, sources, kb: KernelBuilder, out_tensors: dict, out_meta: dict,
          free_chunk: int, kw: dict) -> None:
    tp = plan_tiles(group, sources, kb.target, free_chunk, **kw)
    FusedEmitter(tp, sources, kb, out_tensors, out_meta).emit()
