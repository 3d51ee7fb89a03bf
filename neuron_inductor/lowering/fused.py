"""Lower a fused pointwise/reduction group to one kernel.

The group's *domain* is one logical shape (the reduction input's, else the outputs'). Every tensor the
kernel touches gets strides along the domain axes (``layout.domain_strides``); axes that all tensors
address contiguously are merged. Then the tile plan:

* ``F`` (free axis) is the reduced axis, else the axis most tensors read with stride 1;
* ``P`` (partition axis, tiles of 128 rows) is the largest remaining kept axis;
* other kept axes are affine outer loops; other reduced axes are sequential loops that accumulate;
* ``F`` is cut into chunks that fit SBUF, unless a full-width value is needed after a reduction
  (softmax, norms), in which case the whole row stays on chip (single pass).

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

import sympy
import torch
import torch.fx as fx

from ..ir import HBMAccess, TensorMeta, TileRegion
from . import integers
from .builder import KernelBuilder, TVal, ceil_div
from .fused_ctx import _Ctx  # noqa: F401  (matmul builds one for its epilogue)
from .fused_group import (FusedGroup, Source, _contig, _restore, _snapshot, _split_rows, col_pair,  # noqa: F401
                          last_axis, reduce_dims, sbuf_peak)
from .fused_plan import plan_variants
from .layout import (LoweringError, domain_strides, hw_dtype, merge_dims, word_scale)
from .partition_ops import FLOATS, ColumnSums, broadcast_partitions
from .pointwise import copy, scalar_op, tile_dtype
from .registry import ORDER_PRESERVING_VIEWS, POINTWISE, REDUCTIONS

PMAX = 128
EXPAND = torch.ops.aten.expand.default


class _FusedLowering:
    def __init__(self, group: FusedGroup, sources: dict[fx.Node, Source], kb: KernelBuilder,
                 free_chunk: int, R0: set | None = None, C0: set | None = None) -> None:
        self.g = group
        self.sources = sources
        self.kb = kb
        self.free_chunk = free_chunk
        self.members = set(group.nodes)
        # reductions over an empty extent: every output holds the identity (computed once the
        # empty axes have extent 1 and the values that would feed the reductions are skipped)
        self.empty = 0 in group.domain
        D = [max(int(s), 1) for s in group.domain]
        R = set(group.reduce_axes) if R0 is None else set(R0)
        C = set(getattr(group, "col_axes", ())) if C0 is None else set(C0)
        self.D0, self.R0, self.C0 = D, R, C
        reds = [n for n in group.nodes if n.target in REDUCTIONS]
        self.col_reds = [n for n in reds if C and set(reduce_dims(n)[0]) == C]
        self.reductions = [n for n in reds if n not in self.col_reds]
        # values computed from a column sum: column vectors, evaluated once after the row loops
        self.col_post: set[fx.Node] = set()
        for n in group.nodes:
            if any(a in self.col_post or a in self.col_reds for a in n.all_input_nodes):
                self.col_post.add(n)
        col_numel = math.prod(D) // max(math.prod(D[c] for c in C), 1) if C else 0
        for n in self.col_post:
            if n.target in REDUCTIONS or any(a in self.members and a not in self.col_post
                                             and a not in self.col_reds for a in n.all_input_nodes):
                raise LoweringError(f"{n.name} needs a value of the row loop after the column sums")
            if math.prod(n.meta["val"].shape) > col_numel:
                # evaluated once after the row loops, it would write only its first row tile
                raise LoweringError(f"{n.name} broadcasts a column sum back over the summed axes")
        self.post: set[fx.Node] = set()
        # values computed from a row reduction's result (its dependents in the group, transitively)
        for n in group.nodes:
            if n not in self.col_post and any(a in self.post or a in self.reductions
                                              for a in n.all_input_nodes):
                self.post.add(n)
        self.seeded: set[fx.Node] = set()   # values provided by the caller (a matmul result)
        self.post_nodes = self.post | set(self.reductions) | self._reduced_space()
        self.hoisted: dict[tuple, TVal] = {}
        self.colsums: ColumnSums | None = None

    # --- alignment of shapes to the domain --------------------------------------------------
    def _reduced_space(self) -> set[fx.Node]:
        """Nodes not computed from a reduction whose values still live in its output space: shaped
        like the reduced domain without kept dims and consumed (through same-space pointwise ops) by
        a view that restores the kept dims (``where(std == 0, 0, g / std).unsqueeze(-1)`` in a std
        backward) or by a value computed from the reduction (``where(y == 1, 1 - cos, 0)`` with
        ``cos`` a row sum). Their shape alone would align to the domain's *trailing* axes."""
        if not self.R0:
            return set()
        red, keep = self._reduced_shape(False), self._reduced_shape(True)
        if red == keep:
            return set()
        space: set[fx.Node] = set()
        for n in reversed(self.g.nodes):
            if list(n.meta["val"].shape) != red:
                continue
            for u in n.users:
                if u not in self.members:
                    continue
                ushape = list(u.meta["val"].shape)
                if u in space or (u in self.post and ushape == red) \
                        or (u.target in ORDER_PRESERVING_VIEWS and ushape == keep):
                    space.add(n)
                    break
        return space

    def _reduced_shape(self, keep: bool) -> list[int]:
        return [1 if i in self.R0 else s for i, s in enumerate(self.D0)] if keep else \
            [s for i, s in enumerate(self.D0) if i not in self.R0]

    def to_domain(self, node: fx.Node, size, stride) -> list[int] | None:
        """Strides along the (unmerged) domain of a tensor laid out in ``node``'s output space."""
        size, stride = list(size), list(stride)
        if self.R0 and node in self.post_nodes and size == self._reduced_shape(False) \
                and size != self._reduced_shape(True):
            it = iter(stride)
            return [0 if i in self.R0 else next(it) for i in range(len(self.D0))]
        return domain_strides(TensorMeta(tuple(size), tuple(stride), 0, "float32"), self.D0)

    def arg_strides(self, consumer: fx.Node, arg: fx.Node, meta: TensorMeta) -> list[int]:
        """Domain strides of input ``arg`` (layout ``meta``) as read by ``consumer``."""
        if consumer.target in REDUCTIONS:
            st = domain_strides(meta, self.D0)
        else:
            from .layout import broadcast_strides
            out_shape = list(consumer.meta["val"].shape)
            b = broadcast_strides(meta.size, meta.stride, out_shape)
            st = None if b is None else self.to_domain(consumer, out_shape, b)
        if st is None:
            raise LoweringError(f"{arg.name} {list(meta.size)} cannot be addressed in the domain "
                                f"{self.D0} of {consumer.name}")
        return st

    # --- planning ----------------------------------------------------------------------------
    def plan(self, merge: bool = True) -> None:
        accesses: list[list[int]] = []
        self.node_strides0: dict[fx.Node, list[int]] = {}
        for n in self.g.nodes:
            val = n.meta["val"]
            shape = [max(int(x), 1) for x in val.shape] if self.empty else val.shape
            st = self.to_domain(n, shape, _contig(shape))
            if st is None:
                raise LoweringError(f"{n.name} {list(val.shape)} does not fit domain {self.D0}")
            if n.target is EXPAND and n.args[0] in self.members:
                st = list(self.node_strides0[n.args[0]])  # a broadcast of a tile: the same strides
            self.node_strides0[n] = st
            accesses.append(st)
        self.loads0: dict[tuple[fx.Node, fx.Node], list[int]] = {}
        for n in self.g.nodes:
            if n in self.seeded or (self.empty and n not in self.post):
                continue  # (over an empty domain only values computed from reductions are read)
            for a in n.all_input_nodes:
                if a not in self.members:
                    st = self.arg_strides(n, a, self.sources[a].meta)
                    self.loads0[(n, a)] = st
                    accesses.append(st)
        self.stores0: dict[fx.Node, list[int]] = {}
        for n in self.g.outputs:
            st = self.to_domain(n, n.meta["val"].shape, n.meta["val"].stride())
            if st is None:
                raise LoweringError(f"output {n.name} does not fit the domain")
            self.stores0[n] = st
            accesses.append(st)
        if not merge:
            dom, merged = list(self.D0), accesses
            axes = [[i] for i in range(len(dom))]
        else:
            dom, merged, axes = merge_dims(self.D0, accesses, keep_apart=self.R0 or self.C0)
        R = {i for i, grp in enumerate(axes) if any(a in self.R0 for a in grp)}
        self.C = {i for i, grp in enumerate(axes) if any(a in self.C0 for a in grp)}
        it = iter(merged)
        self.node_strides = {n: next(it) for n in self.node_strides0}
        self.loads = {k: next(it) for k in self.loads0}
        self.stores = {k: next(it) for k in self.stores0}
        self.D, self.R = dom, R
        if merge:
            self._choose_axes()

    def _choose_axes(self) -> None:
        D, R = self.D, self.R
        n = len(D)
        allst = list(self.loads.values()) + list(self.stores.values())
        self.p_reduced = False
        if self.C:
            self._choose_column_axes()
            return
        if R:
            F = max(R)
        elif n:
            F = max(range(n), key=lambda a: (sum(1 for s in allst if abs(s[a]) == 1), a))
        else:
            F = None
        kept = [a for a in range(n) if a not in R and a != F and D[a] > 1]
        P = max(kept, key=lambda a: (D[a], a)) if kept else None
        self.p_reduced = False
        if P is None and F is not None and n >= 1:
            others = [a for a in R if a != F and D[a] > 1]
            if others:
                P, self.p_reduced = max(others, key=lambda a: (D[a], a)), True
            elif not any(D[a] > 1 for a in range(n) if a != F) and _split_rows(D[F]) > 1:
                self._split_free(F, _split_rows(D[F]))
                return
        self.F, self.P = F, P
        self.outer = [a for a in range(n) if a not in R and a not in (F, P) and D[a] > 1]
        self.seq = [a for a in R if a not in (F, P) and D[a] > 1]

    def _choose_column_axes(self) -> None:
        """Column sums: ``F`` is the one axis they keep (also the row reductions' axis), ``P`` the
        largest summed axis, the other summed axes outer loops inside the accumulation."""
        D, C = self.D, self.C
        kept = [a for a in range(len(D)) if a not in C and D[a] > 1]
        if len(kept) != 1 or (self.R and set(a for a in self.R if D[a] > 1) != set(kept)):
            raise LoweringError(f"column sums over {sorted(self.C0)} keep more than one axis of {self.D0}")
        summed = [a for a in C if D[a] > 1]
        if not summed:
            raise LoweringError("column sums over unit axes")
        self.F = kept[0]
        self.P = max(summed, key=lambda a: (D[a], a))
        self.outer = [a for a in summed if a != self.P]
        self.seq = []

    def _budget(self) -> int:
        """Free-axis chunk for a chunked pass: SBUF shared by every value that may be live at once."""
        return int(self.kb.target.sbuf_bytes_per_partition * 0.6) // (4 * max(self._max_live(), 1))

    def _split_free(self, F: int, rows: int) -> None:
        """A 1-D iteration space [N] becomes [rows, N/rows] so (nearly) all partitions work."""
        N, red = self.D[F], F in self.R
        for table in (self.node_strides, self.loads, self.stores):
            for k, st in table.items():
                s = st[F]
                table[k] = [s * (N // rows), s]
        self.D = [rows, N // rows]
        self.R = {0, 1} if red else set()
        self.P, self.F = 0, 1
        self.p_reduced = red
        self.outer, self.seq = [], []

    # --- expressions -------------------------------------------------------------------------
    def offset_expr(self, st: list[int]) -> sympy.Expr:
        e = sympy.Integer(0)
        for a, var in self.loop_vars.items():
            e += st[a] * var
        if self.P is not None:
            e += st[self.P] * PMAX * self.ip
        if self.F is not None:
            e += st[self.F] * self.fc_size * self.fcv
        return e

    # --- emission ----------------------------------------------------------------------------
    def emit(self) -> None:
        kb, D = self.kb, self.D
        F, P = self.F, self.P
        Fsize = D[F] if F is not None else 1
        Psize = D[P] if P is not None else 1
        full_after_reduce = any(n in self.post and self._is_full(n) for n in self.g.nodes)
        single = full_after_reduce or bool(self.col_reds)
        budget = self._budget()
        if single:
            # whole rows on chip (after a row reduction, or for column sums covering all of F); the
            # tiles actually allocated are measured once emitted (``_check_sbuf``)
            if self.seq or self.p_reduced:
                raise LoweringError("a single pass cannot hold a reduction split over loops")
            self.fc_size = Fsize
        else:
            self.fc_size = max(1, min(Fsize, self.free_chunk, budget))
        nchunks = ceil_div(Fsize, self.fc_size)
        self.fc = self.fc_size
        self.loop_vars: dict[int, sympy.Expr] = {}
        kb.plan = (f"domain {self.D0} -> merged {D}; partition axis {P} ({Psize} rows in tiles of "
                   f"{PMAX}), free axis {F} ({Fsize} in {nchunks} chunk(s) of {self.fc_size}); "
                   f"outer loops {self.outer}; reduced axes {sorted(self.R)}"
                   f"{' (sequential ' + str(self.seq) + ')' if self.seq else ''}"
                   f"{'; single pass' if single else ''}{'; partition reduction' if self.p_reduced else ''}")
        self.ctx = _Ctx(self)
        self.accumulate = bool(self.reductions) and (nchunks > 1 or bool(self.seq) or self.p_reduced)
        if self.accumulate:
            for n in self.post:
                for a in n.all_input_nodes:
                    if a in self.members and a not in self.post and a not in self.reductions:
                        raise LoweringError(f"{n.name} needs {a.name} after an accumulated reduction")
        self.row_loop = "affine"
        self._hoist(Psize, nchunks)
        if self.col_reds:
            kb.plan += f"; column sums of {[r.name for r in self.col_reds]} on TensorE"
        if self.hoisted:
            kb.plan += f"; {len(self.hoisted)} row-invariant leaf load(s) hoisted"
        self._outer_loops(0, Psize, Fsize, nchunks)
        if self.col_reds:
            self._finish_columns(Fsize)
        if single:
            self._check_sbuf(Fsize)

    def _check_sbuf(self, Fsize: int) -> None:
        need, have = sbuf_peak(self.kb.body), self.kb.target.sbuf_bytes_per_partition
        if need > have:
            raise LoweringError(f"rows of {Fsize} elements need {need} SBUF bytes per partition in "
                                f"one pass; {have} exist")

    # --- loads hoisted out of the loops, column sums ------------------------------------------
    def _loop_axes(self) -> list[int]:
        return [a for a in self.outer + self.seq + ([self.P] if self.P is not None else [])]

    def _hoist(self, Psize: int, nchunks: int) -> None:
        """Before the loops: allocate column-sum accumulators and load every leaf that no loop
        moves (stride 0 along all loop axes) once, broadcasting it across partitions on TensorE."""
        kb = self.kb
        self.ip, self.fcv, self.loop_vars = sympy.Integer(0), sympy.Integer(0), {}
        self.rows, self.cols = sympy.Integer(1), sympy.Integer(self.fc_size)
        loop_axes = self._loop_axes()
        todo: dict[tuple, tuple[fx.Node, list[int]]] = {}
        if nchunks == 1 and self.P is not None and Psize > 1:
            for (n, a), st in self.loads.items():
                if n not in self.col_post and all(st[x] == 0 for x in loop_axes):
                    todo.setdefault(self._load_key(a, st), (a, st))
        floats = [k for k, (a, st) in todo.items()
                  if hw_dtype(self.sources[a].base_dtype) in FLOATS]
        if self.col_reds:
            self.colsums = ColumnSums(kb, self.col_reds, self.fc_size, 1 if floats else 0)
            dts = {"float32"} | {hw_dtype(self.sources[a].base_dtype) for (_, a) in self.loads} | \
                {hw_dtype(str(n.meta["val"].dtype).replace("torch.", "")) for n in self.g.nodes
                 if isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].dtype.is_floating_point}
            for dt in sorted(dts & set(FLOATS)):
                self.colsums.ones(dt)
            self.row_loop = self.colsums.loop_kind
        scratch = kb.tile((PMAX, kb.target.psum_bank_fp32), "float32", "psum", prefix="bc") \
            if floats else None
        ones_rows: dict[str, object] = {}
        for key, (a, st) in todo.items():
            src = self.sources[a]
            full = st[self.F] != 0
            acc = self._access(src.host, src.base_extent, src.base_dtype, src.meta.storage_offset, st,
                               full)
            cols = self.fc_size if full else 1
            dt = acc.tensor.dtype
            if key not in floats:  # integers: one broadcast DMA per word, hoisted out of the loops
                words = []
                for w in ([0, 1] if src.base_dtype == "int64" else [0]):
                    wacc = acc if w == 0 else self._access(src.host, src.base_extent, src.base_dtype,
                                                           src.meta.storage_offset, st, full, word=1)
                    t = kb.tile((PMAX, cols), dt, prefix="hoist")
                    pat = ((0, PMAX),) + tuple(wacc.pattern[1:])
                    kb.dma(t.region(PMAX, cols), type(wacc)(wacc.tensor, wacc.offset, pat))
                    words.append(t)
                self.hoisted[key] = TVal("full" if full else "row", words[0].full(),
                                         hi=words[1].full() if len(words) > 1 else None,
                                         bound=1 if src.meta.dtype == "bool" else None)
                continue
            else:
                row = kb.tile((1, cols), dt, prefix="row")
                kb.dma(row.region(1, cols), acc)
                if dt not in ones_rows:
                    ones_rows[dt] = kb.tile((1, PMAX), dt, prefix="ones_row")
                    kb.memset(ones_rows[dt].full(), 1.0)
                t = broadcast_partitions(kb, row.region(1, cols), cols, scratch, ones_rows[dt])
            self.hoisted[key] = TVal("full" if full else "row", t.full())

    def _load_key(self, a: fx.Node, st: list[int]) -> tuple:
        """Loads of the same leaf with the same strides (unit axes ignored) share one tile."""
        return (a, tuple(0 if self.D[i] == 1 else s for i, s in enumerate(st)))

    def _col_add(self, n: fx.Node, loads) -> None:
        x = self._arg(n, n.args[0], loads)
        if not n.args[0].meta["val"].dtype.is_floating_point:
            self._check_int_reduction(n, x, "add")
        if x.kind != "full":
            x = copy(self.ctx, x, "float32", "full")
        later = sympy.Gt(sympy.Add(self.ip, *self.loop_vars.values()), 0)  # loop vars are >= 0
        self.colsums.add(n, x.region, self.rows, later if later not in (sympy.true, sympy.false)
                         else bool(later))

    def _finish_columns(self, Fsize: int) -> None:
        """After the row loops: the column sums, then the column-vector values computed from them."""
        self.rows, self.cols = sympy.Integer(1), sympy.Integer(Fsize)
        self.ip, self.fcv = sympy.Integer(0), sympy.Integer(0)
        P_save, self.P = self.P, None
        self.vals = {}
        for r in self.col_reds:
            self.vals[r] = self._finish_reduction(r, TVal("full", self.colsums.result(r)))
            if r in self.g.outputs:
                self._store(r, self.vals[r])
        loads: dict = {}
        for n in self.g.nodes:
            if n not in self.col_post:
                continue
            self.vals[n] = self._compute(n, loads)
            if n in self.g.outputs:
                self._store(n, self.vals[n])
        self.P = P_save

    def _is_full(self, n: fx.Node) -> bool:
        return self.F is not None and self.node_strides[n][self.F] != 0

    def _max_live(self) -> int:
        order = {n: i for i, n in enumerate(self.g.nodes)}
        last = {n: max([order[u] for u in n.users if u in order], default=len(order)) for n in order}
        leaves = {a for n in self.g.nodes for a in n.all_input_nodes if a not in self.members}
        return max([sum(1 for m in order if order[m] <= i <= last[m]) for i in range(len(order))],
                   default=1) + len(leaves) + 2

    def _loop(self, extent: int, kind: str, prefix: str):
        if extent == 1:
            import contextlib
            return contextlib.nullcontext(sympy.Integer(0))
        return self.kb.loop(extent, kind, prefix)

    def _outer_loops(self, k: int, Psize: int, Fsize: int, nchunks: int) -> None:
        if k < len(self.outer):
            a = self.outer[k]
            with self._loop(self.D[a], self.row_loop, "l") as v:
                self.loop_vars[a] = v
                self._outer_loops(k + 1, Psize, Fsize, nchunks)
            return
        np_ = ceil_div(Psize, PMAX)
        if self.p_reduced:
            self.rows = sympy.Integer(min(PMAX, Psize))
            accs = self._init_accs()
            with self._loop(np_, "sequential", "p") as ip:
                self.ip = ip
                self.rows = sympy.Min(PMAX, Psize - PMAX * ip) if Psize % PMAX else sympy.Integer(PMAX)
                self._seq_loops(0, Fsize, nchunks, accs)
            self._finish_partition_reduce(accs)
            return
        with self._loop(np_, self.row_loop, "p") as ip:
            self.ip = ip
            self.rows = (sympy.Min(PMAX, Psize - PMAX * ip) if Psize % PMAX else sympy.Integer(PMAX)) \
                if np_ > 1 else sympy.Integer(Psize)
            accs = self._init_accs() if self.accumulate else {}
            self.vals: dict[fx.Node, TVal] = {}
            self._seq_loops(0, Fsize, nchunks, accs)
            self._post(accs)

    def _init_accs(self) -> dict[fx.Node, TVal]:
        accs = {}
        if not self.accumulate:
            return accs
        for r in self.reductions:
            op, init = REDUCTIONS[r.target]
            t = self.kb.tile((PMAX, 1), tile_dtype(r.meta["val"]) if op != "add" else "float32",
                             prefix="acc")
            reg = t.region(PMAX, 1)
            self.kb.memset(reg, init)
            accs[r] = TVal("row", reg)
        return accs

    def _seq_loops(self, k: int, Fsize: int, nchunks: int, accs) -> None:
        if k < len(self.seq):
            a = self.seq[k]
            with self._loop(self.D[a], "sequential", "r") as v:
                self.loop_vars[a] = v
                self._seq_loops(k + 1, Fsize, nchunks, accs)
            return
        kind = "sequential" if self.reductions else "affine"
        with self._loop(nchunks, kind, "f") as fcv:
            self.fcv = fcv
            self.cols = sympy.Min(self.fc_size, Fsize - self.fc_size * fcv) \
                if Fsize % self.fc_size else sympy.Integer(self.fc_size)
            if nchunks == 1:
                self.cols = sympy.Integer(Fsize)
            self.vals = {}
            self._eval(pre_only=self.accumulate, accs=accs)
        self.fcv = sympy.Integer(0)

    def _post(self, accs) -> None:
        if self.accumulate:
            self.vals = {r: TVal("row", TileRegion(a.region.tile, a.region.starts, (self.rows, 1)))
                         for r, a in accs.items()}
            for r in self.reductions:
                self.vals[r] = self._finish_reduction(r, self.vals[r])
                if r in self.g.outputs:
                    self._store(r, self.vals[r])
            self._eval(post_only=True, accs=accs)

    def _finish_partition_reduce(self, accs) -> None:
        kb = self.kb
        self.rows = sympy.Integer(1)
        self.vals = {}
        for r in self.reductions:
            op = REDUCTIONS[r.target][0]
            acc = accs[r].region
            if acc.dtype != "float32":  # nc_transpose keeps its input's dtype; integer partials
                f = kb.tile(tuple(int(s) for s in acc.tile.shape), "float32", prefix="accf")
                kb.copy("vector", f.full(), acc.tile.full())  # (proven below 2**24) widen exactly
                acc = TileRegion(f, acc.starts, acc.sizes)
            tp = kb.tile((1, PMAX), "float32", "psum", prefix="tp")
            kb.instr("tensor", "nc_transpose", tp.full(), {"data": acc})
            red = kb.tile((1, 1), "float32", prefix="red")
            kb.instr("vector", "tensor_reduce", red.full(), {"data": tp.full()}, op=op, axis=(1,),
                     negate=False, keepdims=True)
            self.vals[r] = self._finish_reduction(r, TVal("row", red.full()))
            if r in self.g.outputs:
                self._store(r, self.vals[r])
        self.ip = sympy.Integer(0)
        self.P_save, self.P = self.P, None
        self._eval(post_only=True, accs=accs)
        self.P = self.P_save

    def _finish_reduction(self, r: fx.Node, v: TVal) -> TVal:
        if r.target._overloadpacket is torch.ops.aten.mean:
            count = math.prod(self.D0[a] for a in reduce_dims(r)[0])
            return scalar_op(self.ctx, v, "multiply", 1.0 / count, "float32")
        return v

    # --- node evaluation ---------------------------------------------------------------------
    def _pass_nodes(self, pre_only: bool, post_only: bool) -> list[fx.Node]:
        out = []
        for n in self.g.nodes:
            if n in self.col_post:
                continue
            if n in self.seeded:
                out.append(n)
            elif pre_only and n in self.post:
                continue
            elif post_only and (n not in self.post or n in self.vals):
                continue
            else:
                out.append(n)
        return out

    def _release_dead(self, n: fx.Node, remaining: dict, refs: dict, loads: dict) -> None:
        """Recycle the tiles of values whose last use in this pass was ``n``. A tile that also holds
        a cached leaf load stays: a member computed through a view of a leaf (``clone(x[:, ::2])``)
        shares the load's tile, and later readers of the leaf get that cached tile."""
        held = {id(v.region.tile) for v in loads.values() if v.region is not None}
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

    def _eval(self, accs, pre_only: bool = False, post_only: bool = False) -> None:
        loads: dict[tuple, TVal] = {}
        nodes = self._pass_nodes(pre_only, post_only)
        later = set(self.g.nodes) - set(nodes) if pre_only else set()
        remaining: dict = {}
        for n in nodes:
            for a in set(n.all_input_nodes):
                if a in self.members and a not in later and a not in self.reductions:
                    remaining[a] = remaining.get(a, 0) + 1
        for n in self.g.nodes:
            if any(u in later for u in n.users):
                remaining.pop(n, None)  # needed by the post pass: keep
        refs: dict = {}
        for n in self.g.nodes:
            is_post = n in self.post
            if n in self.col_post:
                continue
            if n in self.seeded:
                if n in self.g.outputs:
                    self._store(n, self.vals[n])
                if n in remaining:
                    t = self.vals[n].region.tile
                    refs[t] = refs.get(t, 0) + 1
                continue
            if pre_only and is_post:
                continue
            if post_only and (not is_post or n in self.vals):
                continue
            if self.empty and n not in self.post and n not in self.reductions:
                continue  # a value over the empty domain: never needed
            if n in self.col_reds:
                self._col_add(n, loads)
            elif n.target in REDUCTIONS:
                self.vals[n] = self._reduce(n, accs, loads)
            else:
                self.vals[n] = self._compute(n, loads)
            if n in self.g.outputs and n not in self.col_reds and \
                    not (n in self.reductions and self.accumulate):
                self._store(n, self.vals[n])
            v = self.vals.get(n)
            if v is not None and v.region is not None and n in remaining:
                refs[v.region.tile] = refs.get(v.region.tile, 0) + 1
            self._release_dead(n, remaining, refs, loads)

    def _compute(self, n: fx.Node, loads) -> TVal:
        """The value of a view or pointwise node from its arguments' values."""
        if n.target in ORDER_PRESERVING_VIEWS or n.target is EXPAND:
            return self._arg(n, n.args[0], loads)  # an expand reads the same tile along the broadcast
        fn = POINTWISE[n.target]
        skip0 = n.target is torch.ops.aten.copy_.default  # destination: written, not read
        args = [None if (skip0 and i == 0) else self._arg(n, a, loads) for i, a in enumerate(n.args)]
        kwargs = {k: self._arg(n, v, loads) for k, v in n.kwargs.items()}
        try:
            return self.ctx.call(fn, n, *args, **kwargs)
        except NotImplementedError as e:
            raise LoweringError(f"{n.target}: {e}") from None

    def _arg(self, consumer: fx.Node, a, loads):
        if isinstance(a, fx.Node):
            if a in self.members:
                return self.vals[a]
            return self._load(consumer, a, loads)
        if isinstance(a, (int, float, bool)) and not isinstance(a, torch.dtype):
            return TVal.const(a)
        return a

    def _reduce(self, n: fx.Node, accs, loads) -> TVal:
        op, init = REDUCTIONS[n.target]
        if self.empty:  # over no elements: the identity (mean: 0 / 0)
            if n.target._overloadpacket is torch.ops.aten.mean:
                return TVal.const(math.nan)
            return TVal.const(init if n.meta["val"].dtype.is_floating_point else int(init))
        x = self._arg(n, n.args[0], loads)
        if not n.args[0].meta["val"].dtype.is_floating_point:
            self._check_int_reduction(n, x, op)
        if x.kind != "full":
            x = copy(self.ctx, x, "float32", "full")
        dt = "float32" if op == "add" else x.dtype
        part = self.ctx.new("row", dt)
        self.kb.instr("vector", "tensor_reduce", part, {"data": x.region}, op=op, axis=(1,),
                      negate=False, keepdims=True)
        if self.accumulate:
            acc = accs[n].region
            accr = TileRegion(acc.tile, acc.starts, (self.rows, 1))
            self.kb.instr("vector", "tensor_tensor", accr, {"data1": accr, "data2": part}, op=op)
            return accs[n]
        return self._finish_reduction(n, TVal("row", part))

    def _check_int_reduction(self, n: fx.Node, x: TVal, op: str) -> None:
        """Reductions run in fp32: an integer one is lowered only when every partial result is an
        exact fp32 integer (|x| * count < 2**24); otherwise the node is a declared fallback."""
        b = integers.bound(x)
        count = math.prod(self.D0[a] for a in reduce_dims(n)[0]) if op in ("add", "multiply") else 1
        limit = b ** count if op == "multiply" and b is not None and count < 64 else \
            (None if b is None or op == "multiply" and count >= 64 else b * count)
        if limit is None or limit >= integers.EXACT:
            raise LoweringError(f"{n.target}: integer reduction over values not proven below 2**24 "
                                "(fp32 accumulation would round)")

    def _access(self, host: str, numel: int, dtype_name: str, offset0: int, st: list[int],
                full: bool, kind: str = "input", word: int = 0) -> HBMAccess:
        scale = word_scale(dtype_name)
        hw = hw_dtype(dtype_name)
        if kind == "output":
            t = host  # an HBMTensor already
        else:
            t = self.kb.param(host, numel * scale, hw, kind)
        off = (offset0 + self.offset_expr(st)) * scale + word
        prow = st[self.P] * scale if self.P is not None else 0
        rows = self.rows if self.P is not None else 1
        pat = ((prow, rows), (st[self.F] * scale if full else 1, self.cols if full else 1))
        return HBMAccess(t, sympy.expand(off), pat)

    def _load(self, consumer: fx.Node, a: fx.Node, loads) -> TVal:
        st = self.loads[(consumer, a)]
        key = self._load_key(a, st)
        if key in loads:
            return loads[key]
        if key in self.hoisted:
            hv = self.hoisted[key]
            h = hv.region

            def cut(r):
                return None if r is None else \
                    TileRegion(r.tile, r.starts, (self.rows, self.cols if h.sizes[1] != 1 else 1))
            loads[key] = TVal(hv.kind, cut(h), hi=cut(hv.hi), bound=hv.bound)
            return loads[key]
        src = self.sources[a]
        full = self.F is not None and st[self.F] != 0
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
        st = self.stores[n]
        out = self.out_tensors[n]
        meta = self.out_meta[n]
        full = self.F is not None and st[self.F] != 0
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


def lower_fused(group: FusedGroup, sources: dict[fx.Node, Source], kb: KernelBuilder,
                out_tensors: dict, out_meta: dict, free_chunk: int) -> None:
    """Emit the kernel body for ``group`` into ``kb``. ``out_tensors[n]`` are the HBM outputs."""
    *preferred, (last, kw) = plan_variants(group)
    for g, pkw in preferred:
        snap = _snapshot(kb)
        try:
            return _emit(g, sources, kb, out_tensors, out_meta, free_chunk, pkw)
        except LoweringError:
            _restore(kb, snap)
    _emit(last, sources, kb, out_tensors, out_meta, free_chunk, kw)


def _emit(group: FusedGroup, sources, kb: KernelBuilder, out_tensors: dict, out_meta: dict,
          free_chunk: int, kw: dict) -> None:
    lw = _FusedLowering(group, sources, kb, free_chunk, **kw)
    lw.out_tensors, lw.out_meta = out_tensors, out_meta
    lw.plan()
    lw.emit()
