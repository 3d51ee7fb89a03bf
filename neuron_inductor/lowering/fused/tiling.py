"""The tile plan of a fused group: computed once, before any instruction is emitted, then read only.

:func:`plan_tiles` decides everything the emitter (``emitter.py``) needs to know up front:

* which part of the kernel computes each member (row work, values after a row reduction, column
  sums and the column vectors computed from them);
* every tensor's strides along the group's domain (``layout.domain_strides``), and the domain with
  the axes all tensors address contiguously merged;
* the axes: ``F`` (free) is the reduced axis, else the axis most tensors read with stride 1; ``P``
  (partition, tiles of ``target.partitions`` rows) the largest remaining kept axis; other kept axes
  are outer loops, other reduced axes sequential loops that accumulate; a lone flat axis is split
  into ``[rows, n / rows]`` so many partitions work;
* the chunking of ``F``: chunks that fit SBUF, unless a full-width value is needed after a
  reduction (softmax, norms) or column sums cover all of ``F`` (single pass: whole rows on chip),
  and whether row reductions accumulate across chunks / loops.

The result is a frozen :class:`TilePlan`. Callers that fix the axes themselves (the matmul epilogue)
plan with ``merge=False`` and ``dataclasses.replace`` the axes and chunk width in.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Mapping, Sequence

import torch
import torch.fx as fx

from ...ir import TensorMeta, contiguous_strides
from ...target import Target
from ..builder import ceil_div
from .group import FusedGroup, Source, reduce_dims
from .scan import SCANS, scan_dim
from ..layout import LoweringError, broadcast_strides, domain_strides, merge_dims
from ..loops import largest_divisor, split_axis
from ..registry import ORDER_PRESERVING_VIEWS, REDUCTIONS

EXPAND = torch.ops.aten.expand.default


@dataclass(frozen=True, eq=False)
class TilePlan:
    """How one fused kernel walks its group. Axis numbers index the merged domain ``D``."""

    group: FusedGroup
    #: the unmerged domain (empty axes as 1), its reduced axes and column-sum axes
    D0: tuple[int, ...]
    R0: frozenset[int]
    C0: frozenset[int]
    members: frozenset[fx.Node]
    #: the domain has an empty axis: outputs hold the reductions' identities
    empty: bool
    #: column sums (summed over ``C0``) and the row reductions
    col_reds: tuple[fx.Node, ...]
    reductions: tuple[fx.Node, ...]
    #: values computed from a column sum (once, after the row loops) / from a row reduction
    col_post: frozenset[fx.Node]
    post: frozenset[fx.Node]
    #: values the caller provides (the matmul result of an epilogue)
    seeded: frozenset[fx.Node]
    #: nodes that live in a reduction's output space
    post_nodes: frozenset[fx.Node]
    #: strides along the merged domain: each member's value, each leaf read (consumer, leaf), each output
    node_strides: Mapping[fx.Node, tuple[int, ...]]
    loads: Mapping[tuple[fx.Node, fx.Node], tuple[int, ...]]
    stores: Mapping[fx.Node, tuple[int, ...]]
    D: tuple[int, ...]
    R: frozenset[int]
    C: frozenset[int]
    F: int | None = None
    P: int | None = None
    outer: tuple[int, ...] = ()
    seq: tuple[int, ...] = ()
    #: the partition axis is a reduced one (a sum over rows, finished by a transpose)
    p_reduced: bool = False
    #: free-axis chunk (tile width), and whether all of ``F`` stays on chip in one pass
    fc: int = 1
    single: bool = False
    #: row reductions accumulate across chunks or loops
    accumulate: bool = False
    #: scans (cumsum, cumprod) in the group and the merged axis they run along (``F``)
    scans: tuple[fx.Node, ...] = ()
    S: int | None = None
    #: ``F`` is a kept axis: reductions run over sequential loops inside each free chunk and
    #: accumulate element-wise in a [rows, fc] tile (sums over a middle axis, read contiguously)
    kept_free: bool = False
    #: (kept_free) each reduced-loop iteration writes its own slot of a [rows, slots * fc] tile and
    #: the slots are combined after the loop: no value crosses iterations, so the loop is affine
    slots: bool = False
    #: leaf -> where its elements live (host buffer, offset, dtypes): two view nodes of one buffer
    #: read with the same strides are one load
    leaf_ids: Mapping[fx.Node, tuple] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def fsize(self) -> int:
        return self.D[self.F] if self.F is not None else 1

    @property
    def psize(self) -> int:
        return self.D[self.P] if self.P is not None else 1

    @property
    def nchunks(self) -> int:
        return ceil_div(self.fsize, self.fc)

    @property
    def loop_axes(self) -> list[int]:
        return list(self.outer) + list(self.seq) + ([self.P] if self.P is not None else [])

    def load_key(self, a: fx.Node, st: Sequence[int]) -> tuple:
        """Loads of the same leaf with the same strides (unit axes ignored) share one tile."""
        return (self.leaf_ids.get(a, a), tuple(0 if self.D[i] == 1 else s for i, s in enumerate(st)))

    def is_full(self, n: fx.Node) -> bool:
        """``n``'s value varies along the free axis (a [rows, cols] tile, not a [rows, 1] one)."""
        return self.F is not None and self.node_strides[n][self.F] != 0

    def describe(self, pmax: int) -> str:
        return (f"domain {list(self.D0)} -> merged {list(self.D)}; partition axis {self.P} ({self.psize} rows "
                f"in tiles of {pmax}), free axis {self.F} ({self.fsize} in {self.nchunks} chunk(s) of "
                f"{self.fc}); outer loops {list(self.outer)}; reduced axes {sorted(self.R)}"
                f"{' (sequential ' + str(list(self.seq)) + ')' if self.seq else ''}"
                f"{'; single pass' if self.single else ''}{'; partition reduction' if self.p_reduced else ''}")


def plan_tiles(group: FusedGroup, sources: Mapping[fx.Node, Source], target: Target, free_chunk: int,
               R0: set | None = None, C0: set | None = None, seeded: frozenset = frozenset(),
               merge: bool = True, kept_free: bool = False, apart: frozenset = frozenset()) -> TilePlan:
    """The tile plan of ``group`` (``R0``/``C0`` override its reduced / column-sum axes;
    ``kept_free`` puts a kept axis on the free side, see ``_Planner.kept_free_axes``; ``apart``:
    kept axes never merged with their other neighbours, a batched GEMM's batch axes in
    ``matmul/rows.py``, so no row tile spans two batch entries)."""
    pl = _Planner(group, sources, R0, C0, seeded)
    fields = pl.strides(merge, frozenset(apart))
    if merge:
        fields.update(pl.kept_free_axes(fields, target.partitions) if kept_free
                      else pl.axes(fields, target.partitions))
    for k in ("node_strides", "loads", "stores"):  # read-only from here on
        fields[k] = MappingProxyType({key: tuple(st) for key, st in fields[k].items()})
    fields["leaf_ids"] = MappingProxyType({a: (s.host, s.meta.storage_offset, s.base_dtype, s.meta.dtype)
                                           for a, s in sources.items()})
    tp = TilePlan(**pl.roles(), **fields)
    return _chunk(tp, target, free_chunk, pl.max_live()) if merge else tp


def split_rows(n: int, pmax: int) -> int:
    """Partitions for a flat span of ``n`` elements: the largest divisor of ``n`` up to ``pmax``, used
    when it keeps at least a quarter of the partitions busy and leaves >= 2 elements per partition (a
    span of 154800 = 2*129*600 runs as [120, 1290] instead of one partition of 154800); else 1."""
    if n < 2 * (pmax // 4):
        return 1
    d = largest_divisor(n, min(pmax, n // 2))
    return d if d >= pmax // 4 else 1


def _chunk(tp: TilePlan, target: Target, free_chunk: int, live: int) -> TilePlan:
    """Free-axis chunking: whole rows on chip after a row reduction or for column sums, else chunks
    of SBUF shared by every value that may be live at once."""
    if tp.scans and (tp.p_reduced or tp.col_reds):
        raise LoweringError("a scan beside a partition reduction or column sums")
    if tp.kept_free:  # one [rows, fc] accumulator per reduction beside the chunk's live values
        _check_kept_free(tp)
        nseq, nred = math.prod(tp.D[a] for a in tp.seq), len(tp.reductions)
        budget = int(target.sbuf_bytes_per_partition * 0.6) // (4 * (live + nred + 1))
        slot_budget = int(target.sbuf_bytes_per_partition * 0.6) // (4 * (live + nred * nseq + 1))
        slots = bool(nred) and 1 < nseq <= MAX_SLOTS and slot_budget >= min(tp.fsize, MIN_SLOT_CHUNK)
        fc = max(1, min(tp.fsize, free_chunk, slot_budget if slots else budget))
        return _check_post_scans(replace(tp, fc=fc, single=False, accumulate=True, slots=slots))
    single = any(n in tp.post and tp.is_full(n) for n in tp.group.nodes) or bool(tp.col_reds)
    if single:
        if tp.seq or tp.p_reduced:
            raise LoweringError("a single pass cannot hold a reduction split over loops")
        fc = tp.fsize  # (the tiles actually allocated are measured once emitted)
    else:
        budget = int(target.sbuf_bytes_per_partition * 0.6) // (4 * max(live, 1))
        fc = max(1, min(tp.fsize, free_chunk, budget))
    accumulate = bool(tp.reductions) and (ceil_div(tp.fsize, fc) > 1 or bool(tp.seq) or tp.p_reduced)
    if accumulate:
        for n in tp.post:
            for a in n.all_input_nodes:
                if a in tp.members and a not in tp.post and a not in tp.reductions:
                    raise LoweringError(f"{n.name} needs {a.name} after an accumulated reduction")
    return _check_post_scans(replace(tp, fc=fc, single=single, accumulate=accumulate))


#: a kept-free reduction over at most this many rows per element keeps one slot per row, in chunks
#: of at least ``MIN_SLOT_CHUNK`` (else it accumulates in a sequential loop)
MAX_SLOTS = 64
MIN_SLOT_CHUNK = 512


def _check_post_scans(tp: TilePlan) -> TilePlan:
    """A scan computed from a reduction runs where no carry crosses chunks: in one chunk."""
    if tp.nchunks > 1 and any(n in tp.post for n in tp.scans):
        raise LoweringError("a scan after a reduction over several chunks")
    return tp


def _check_kept_free(tp: TilePlan) -> None:
    """The values computed from the reductions run once per chunk, after the reduced loops: they
    may read only the reductions and leaves, and nothing of theirs may vary along a reduced axis."""
    for n in tp.post:
        if any(a in tp.members and a not in tp.post and a not in tp.reductions for a in n.all_input_nodes):
            raise LoweringError(f"{n.name} needs a value of the reduced loops after them")
    late = [st for (n, _), st in tp.loads.items() if n in tp.post] + \
        [st for n, st in tp.stores.items() if n in tp.post or n in tp.reductions] + \
        [tp.node_strides[n] for n in tp.post]
    if any(st[a] != 0 for st in late for a in tp.seq):
        raise LoweringError("a value after the reductions varies along a reduced axis")


class _Planner:
    """Working state of :func:`plan_tiles` (node roles first, then strides, then axes)."""

    def __init__(self, group: FusedGroup, sources: Mapping[fx.Node, Source], R0: set | None,
                 C0: set | None, seeded: frozenset) -> None:
        self.g = group
        self.sources = sources
        self.members = set(group.nodes)
        self.empty = 0 in group.domain
        D = [max(int(s), 1) for s in group.domain]
        R = set(group.reduce_axes) if R0 is None else set(R0)
        C = set(group.col_axes) if C0 is None else set(C0)
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
        self.seeded = frozenset(seeded)
        self.post_nodes = self.post | set(self.reductions) | self._reduced_space()
        self.scans = [n for n in group.nodes if n.target in SCANS]
        axes0 = {scan_dim(n) for n in self.scans}
        if len(axes0) > 1 or any(list(n.meta["val"].shape) != list(group.domain) for n in self.scans):
            raise LoweringError("scans along different axes, or not over the whole domain")
        self.S0 = next(iter(axes0), None)

    def roles(self) -> dict:
        return dict(group=self.g, D0=tuple(self.D0), R0=frozenset(self.R0), C0=frozenset(self.C0),
                    members=frozenset(self.members), empty=self.empty, col_reds=tuple(self.col_reds),
                    reductions=tuple(self.reductions), col_post=frozenset(self.col_post),
                    post=frozenset(self.post), seeded=self.seeded, post_nodes=frozenset(self.post_nodes),
                    scans=tuple(self.scans))

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
            out_shape = list(consumer.meta["val"].shape)
            b = broadcast_strides(meta.size, meta.stride, out_shape)
            st = None if b is None else self.to_domain(consumer, out_shape, b)
        if st is None:
            raise LoweringError(f"{arg.name} {list(meta.size)} cannot be addressed in the domain "
                                f"{self.D0} of {consumer.name}")
        return st

    # --- strides and axes --------------------------------------------------------------------
    def strides(self, merge: bool, apart: frozenset = frozenset()) -> dict:
        """Every access's strides along the domain, merged where all allow (``merge``)."""
        accesses: list[list[int]] = []
        node_strides0: dict[fx.Node, list[int]] = {}
        for n in self.g.nodes:
            val = n.meta["val"]
            shape = [max(int(x), 1) for x in val.shape] if self.empty else val.shape
            st = self.to_domain(n, shape, list(contiguous_strides(shape)))
            if st is None:
                raise LoweringError(f"{n.name} {list(val.shape)} does not fit domain {self.D0}")
            if n.target is EXPAND and n.args[0] in self.members:
                st = list(node_strides0[n.args[0]])  # a broadcast of a tile: the same strides
            node_strides0[n] = st
            accesses.append(st)
        loads0: dict[tuple[fx.Node, fx.Node], list[int]] = {}
        for n in self.g.nodes:
            if n in self.seeded or (self.empty and n not in self.post):
                continue  # (over an empty domain only values computed from reductions are read)
            for a in n.all_input_nodes:
                if a not in self.members:
                    st = self.arg_strides(n, a, self.sources[a].meta)
                    loads0[(n, a)] = st
                    accesses.append(st)
        stores0: dict[fx.Node, list[int]] = {}
        for n in self.g.outputs:
            st = self.to_domain(n, n.meta["val"].shape, n.meta["val"].stride())
            if st is None:
                raise LoweringError(f"output {n.name} does not fit the domain")
            stores0[n] = st
            accesses.append(st)
        if not merge:
            dom, merged = list(self.D0), accesses
            axes = [[i] for i in range(len(dom))]
        else:
            dom, merged, axes = merge_dims(self.D0, accesses, keep_apart=(self.R0 or self.C0) | apart,
                                           alone={self.S0} if self.scans else set())
        it = iter(merged)
        return dict(node_strides={n: next(it) for n in node_strides0}, loads={k: next(it) for k in loads0},
                    stores={k: next(it) for k in stores0}, D=tuple(dom),
                    S=next((i for i, grp in enumerate(axes) if self.S0 in grp), None) if self.scans else None,
                    R=frozenset(i for i, grp in enumerate(axes) if any(a in self.R0 for a in grp)),
                    C=frozenset(i for i, grp in enumerate(axes) if any(a in self.C0 for a in grp)))

    def axes(self, f: dict, pmax: int) -> dict:
        """``F``, ``P``, outer and sequential loops (see the module docstring)."""
        D, R = f["D"], f["R"]
        n = len(D)
        allst = list(f["loads"].values()) + list(f["stores"].values())
        if f["C"]:
            return self._column_axes(D, R, f["C"])
        if f["S"] is not None and R and max(R) != f["S"]:
            raise LoweringError("the scanned axis cannot be the free axis")
        if f["S"] is not None and not R:
            F = f["S"]
        elif R:
            F = max(R)
        elif n:
            F = max(range(n), key=lambda a: (sum(1 for s in allst if abs(s[a]) == 1), a))
        else:
            F = None
        kept = [a for a in range(n) if a not in R and a != F and D[a] > 1]
        P = max(kept, key=lambda a: (D[a], a)) if kept else None
        p_reduced = False
        if P is None and F is not None and n >= 1:
            others = [a for a in R if a != F and D[a] > 1]
            if others:
                P, p_reduced = max(others, key=lambda a: (D[a], a)), True
            elif not any(D[a] > 1 for a in range(n) if a != F) and split_rows(D[F], pmax) > 1 \
                    and f["S"] is None:
                return self._split_free(f, F, split_rows(D[F], pmax))
        return dict(F=F, P=P, p_reduced=p_reduced,
                    outer=tuple(a for a in range(n) if a not in R and a not in (F, P) and D[a] > 1),
                    seq=tuple(a for a in R if a not in (F, P) and D[a] > 1))

    def kept_free_axes(self, f: dict, pmax: int) -> dict:
        """Reductions that keep the axis most accesses read with stride 1 (a sum over the middle
        axis of ``[B, S, H]``): that axis is ``F``, the largest other kept axis ``P``, the reduced
        axes sequential loops inside each chunk. The default plan would put the reduced axis on
        the free side and read it with a stride (one DMA descriptor per element)."""
        D, R = f["D"], f["R"]
        allst = list(f["loads"].values()) + list(f["stores"].values())
        kept = [a for a in range(len(D)) if a not in R and D[a] > 1]
        if not R or f["C"] or not kept:
            raise LoweringError("no kept axis to put on the free side")
        F = max(kept, key=lambda a: (sum(1 for s in allst if abs(s[a]) == 1), a))
        if f["S"] is not None and F != f["S"]:
            raise LoweringError("the scanned axis is not the kept free axis")
        rest = [a for a in kept if a != F]
        P = max(rest, key=lambda a: (D[a], a)) if rest else None
        if P is None or D[P] < pmax // 4:
            raise LoweringError("too few rows for a kept free axis")
        return dict(F=F, P=P, kept_free=True, outer=tuple(a for a in rest if a != P),
                    seq=tuple(a for a in sorted(R) if D[a] > 1))

    def _column_axes(self, D, R, C) -> dict:
        """Column sums: ``F`` is the one axis they keep (also the row reductions' axis), ``P`` the
        largest summed axis, the other summed axes outer loops inside the accumulation."""
        kept = [a for a in range(len(D)) if a not in C and D[a] > 1]
        if len(kept) != 1 or (R and set(a for a in R if D[a] > 1) != set(kept)):
            raise LoweringError(f"column sums over {sorted(self.C0)} keep more than one axis of {self.D0}")
        summed = [a for a in C if D[a] > 1]
        if not summed:
            raise LoweringError("column sums over unit axes")
        P = max(summed, key=lambda a: (D[a], a))
        return dict(F=kept[0], P=P, outer=tuple(a for a in summed if a != P), seq=())

    def _split_free(self, f: dict, F: int, rows: int) -> dict:
        """A 1-D iteration space [N] becomes [rows, N/rows] so (nearly) all partitions work."""
        N, red = f["D"][F], F in f["R"]
        out = {k: {key: split_axis(st, F, N, rows) for key, st in f[k].items()}
               for k in ("node_strides", "loads", "stores")}
        return dict(out, D=(rows, N // rows), R=frozenset({0, 1}) if red else frozenset(), P=0, F=1,
                    p_reduced=red, outer=(), seq=())

    def max_live(self) -> int:
        """Values that may be live at once (a bound for sizing free-axis chunks)."""
        order = {n: i for i, n in enumerate(self.g.nodes)}
        last = {n: max([order[u] for u in n.users if u in order], default=len(order)) for n in order}
        leaves = {a for n in self.g.nodes for a in n.all_input_nodes if a not in self.members}
        return max([sum(1 for m in order if order[m] <= i <= last[m]) for i in range(len(order))],
                   default=1) + len(leaves) + 2
