"""Routing pins for the architecture benchmark's MoE checks: ``topk`` decisions recorded in one run
and replayed in others, and ``topk`` with exact ties taken lowest index first.

Both exist because an MoE router's top-k choice is discontinuous in its scores: two equally correct
runs may route a near-tied (or exactly tied) token differently, and the comparison must tell that
apart from a wrong number. ``arch_checks.py`` decides when to use them."""
from __future__ import annotations

import contextlib
from typing import Any

import torch


class RoutingPin:
    """Routing decisions (``torch.topk`` indices) recorded in one run and replayed in others.

    An MoE router's top-k choice is a discontinuous function of its scores: a token whose k-th
    and (k+1)-th expert scores lie within bf16 rounding noise of each other (or tie exactly, and
    torch leaves the order of tied ``topk`` values unspecified) may go to another expert in two
    equally correct bf16 computations, and its expert gradients then differ by far more than
    rounding. Pinning runs the fp32 reference with the real ``topk`` ("record") and the eager and
    compiled bf16 steps with the recorded indices ("replay": values gathered from their own
    scores), so all three route alike and the rest of the step is compared as usual. The
    scores, the routing weights and their gradients are still computed by each run itself.

    Two techniques replay the choice (``technique``):

    - ``"mode"``: inside :meth:`active`, a torch function mode (:class:`PinMode`) sends every
      ``torch.topk`` and ``Tensor.topk`` call to :func:`pinned_topk` (routers use both spellings;
      patching the ``Tensor`` method instead would make Dynamo run the replay on fake tensors).
      Dynamo inlines the mode's handler, so the compiled graph takes the recorded indices as inputs.
    - ``"masks"``: for routers whose ``topk`` input is exactly a module's output (up to a dtype
      cast and a reshape; jetmoe's ``self.layer(h).float().topk(...)``), a forward hook adds a
      constant mask to that output: 0 at the recorded choices, -inf elsewhere. The model's own
      ``topk`` then picks the recorded experts and sees their scores unchanged (x + 0 == x). It
      exists because Dynamo cannot resume a frame under a torch function mode after a graph break
      (jetmoe's ``expert_size.tolist()``): with ``"mode"`` that compiled replay fails in
      ``torch.arange(..., device=...)`` with any backend. The record run notes each call's source
      module (:meth:`masks_apply` says whether every call has its own)."""

    #: how many times eager bf16's score error the compiled run's may be (the bf16 check's factor)
    noise_factor = 2.0

    def __init__(self, technique: str = "mode") -> None:
        if technique not in ("mode", "masks"):
            raise ValueError(f"routing pin technique {technique!r}: expected 'mode' or 'masks'")
        self.technique = technique
        self.mode = "off"
        self.model: torch.nn.Module | None = None
        self.indices: list[torch.Tensor] = []
        self.n = 0
        #: topk inputs seen by the eager runs, per call: (reference, bf16 eager)
        self.scores: dict[str, list[torch.Tensor]] = {"record": [], "replay": []}
        self.calls: list[tuple[int, int, bool]] = []  # (k, dim, largest) per recorded call
        #: gradients a pinned rerun passed by their error spread (``check_train``)
        self.noisy: set[str] = set()
        #: per recorded call: the module whose output the topk input is (None: no such module),
        #: and the (topk input, module output) shapes
        self.sources: list[str | None] = []
        self.shapes: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        self._last: tuple[str, torch.Tensor] | None = None
        self._hooks: list[Any] = []
        self._mode: PinMode | None = None

    def active(self, mode: str, model: torch.nn.Module | None = None) -> "RoutingPin":
        """Record or replay around a step of ``model`` (needed to note sources and for masks)."""
        self.mode, self.n, self.model = mode, 0, model
        return self

    def masks_apply(self) -> bool:
        """Whether the ``"masks"`` technique can replay the recorded calls: each has a source
        module of its own."""
        return bool(self.sources) and None not in self.sources and len(set(self.sources)) == len(self.sources)

    def __enter__(self) -> "RoutingPin":
        if self.mode == "replay" and self.technique == "masks":
            self._install_masks()
            return self
        if self.mode == "record" and self.model is not None:
            self._track_sources()
        self._mode = PinMode()
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self._hooks:
            h.remove()
        self._hooks, self._last = [], None
        if self._mode is not None:
            self._mode.__exit__(*exc)
            self._mode = None
            if self.mode == "replay" and exc[0] is None and self.n != len(self.indices):
                raise RuntimeError(f"routing pin: {self.n} topk calls replayed, {len(self.indices)} recorded")
        self.mode = "off"

    def _track_sources(self) -> None:
        """Remember the last tensor any module of the model returned (the candidate source)."""
        def note(name: str) -> Any:
            def hook(_mod: Any, _args: Any, out: Any) -> None:
                if isinstance(out, torch.Tensor):
                    self._last = (name, out)
            return hook
        assert self.model is not None
        self._hooks = [m.register_forward_hook(note(n)) for n, m in self.model.named_modules()]

    def _install_masks(self) -> None:
        """Hooks adding 0 / -inf masks to the source modules' outputs (see the class doc)."""
        if not self.masks_apply() or self.model is None:
            raise RuntimeError("routing pin: the masks technique needs a model whose every topk "
                               "input is its own module's output")
        modules = dict(self.model.named_modules())
        if len(self.scores["replay"]) != len(self.indices):  # the eager replay fills them in
            self.scores["replay"] = [torch.empty(0)] * len(self.indices)
        for i, (name, idx, (k, dim, largest), (in_shape, out_shape)) in enumerate(
                zip(self.sources, self.indices, self.calls, self.shapes)):
            fill = float("-inf") if largest else float("inf")
            mask = torch.full(in_shape, fill).scatter(dim, idx, 0.0).reshape(out_shape)

            def hook(_mod: Any, _args: Any, out: torch.Tensor, mask: torch.Tensor = mask, i: int = i,
                     in_shape: tuple = in_shape) -> torch.Tensor:
                if not torch.compiler.is_compiling():
                    self.scores["replay"][i] = out.detach().float().reshape(in_shape).clone()
                return out + mask.to(out.dtype)
            self._hooks.append(modules[name].register_forward_hook(hook))

    def near_ties(self) -> int:
        """Tokens whose reference gap between the k-th and (k+1)-th score is within the bf16
        noise of both runs: eager bf16's own largest score error (measured here) plus the
        compiled one's, which the bf16 check allows to be ``noise_factor`` times larger. Only such
        tokens can route differently in two correct bf16 runs."""
        count = 0
        for (k, dim, largest), ref, bf in zip(self.calls, self.scores["record"], self.scores["replay"]):
            if k >= ref.shape[dim]:
                continue
            noise = float((bf - ref).abs().max())
            top = ref.sort(dim=dim, descending=largest).values
            gap = (top.narrow(dim, k - 1, 1) - top.narrow(dim, k, 1)).abs()
            count += int((gap <= (1 + self.noise_factor) * noise).sum())
        return count


TORCH_TOPK = torch.topk
PIN = RoutingPin()
TOPKS = (torch.topk, torch.Tensor.topk)


class PinMode(torch.overrides.TorchFunctionMode):
    """Routes ``torch.topk`` and ``Tensor.topk`` to :func:`pinned_topk`; every other call runs as is."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func in TOPKS:
            return pinned_topk(*args, **(kwargs or {}))
        return func(*args, **(kwargs or {}))


def pinned_topk(input: torch.Tensor, k: int, dim: int = -1, largest: bool = True,
                 sorted: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk`` while a :class:`RoutingPin` is active (see there)."""
    pin = PIN
    if pin.mode == "record":
        values, idx = TORCH_TOPK(input, k, dim, largest, sorted)
        pin.indices.append(idx.detach().clone())
        pin.calls.append((k, dim, largest))
        pin.scores["record"].append(input.detach().float().clone())
        last = pin._last
        same = (last is not None and last[1].numel() == input.numel()
                and torch.equal(last[1].detach().to(input.dtype).reshape(input.shape), input.detach()))
        pin.sources.append(last[0] if same else None)
        pin.shapes.append((tuple(input.shape), tuple(last[1].shape) if same else ()))
        return torch.return_types.topk((values, idx))
    if pin.mode != "replay":
        return TORCH_TOPK(input, k, dim, largest, sorted)
    idx = pin.indices[pin.n]
    pin.n += 1
    if not torch.compiler.is_compiling():
        pin.scores["replay"].append(input.detach().float().clone())
    return torch.return_types.topk((torch.gather(input, dim, idx), idx))  # ``.indices`` works


@contextlib.contextmanager
def lowest_index_ties(seen: list[int]):
    """``torch.topk`` and ``Tensor.topk`` returning tied values in increasing index order.

    torch leaves the order of tied ``topk`` values unspecified (CPU returns its partial sort's
    order), so when a tie straddles the k-th place two correct runs keep different entries. This
    order (a stable sort) is one valid ``topk`` result, and it is the one the compiler documents
    (graph/decompositions_select.py). ``seen`` collects, per call, the number of rows whose k-th and
    (k+1)-th values tie exactly (finite)."""
    saved = torch.topk, torch.Tensor.topk

    def topk(input: torch.Tensor, k: int, dim: int = -1, largest: bool = True,
             sorted: bool = True) -> Any:
        v, i = torch.sort(input, dim=dim, descending=largest, stable=True)
        if 0 < k < input.shape[dim]:
            kth, nxt = v.narrow(dim, k - 1, 1), v.narrow(dim, k, 1)
            seen.append(int(((kth == nxt) & torch.isfinite(kth)).sum()))
        return torch.return_types.topk((v.narrow(dim, 0, k), i.narrow(dim, 0, k)))

    torch.topk = torch.Tensor.topk = topk
    try:
        yield
    finally:
        torch.topk, torch.Tensor.topk = saved
