"""Fused pointwise / reduction kernels: one loop nest over a group of ops, one pass over HBM.

* ``group``: what a kernel group is made of (``Group``, ``Source``), reduction axes, builder guards;
* ``variants``: which tile plans a group tries, best first;
* ``tiling``: the plan object (``TilePlan``, ``plan_tiles``), computed once before any instruction;
* ``emitter``: ``FusedEmitter``, which walks the plan and emits the kernel (registered as ``"fused"``);
* ``scan``: fp32 ``cumsum`` / ``cumprod`` along the last axis inside a fused kernel, the running
  value carried from one free chunk to the next;
* ``ctx``: what a pointwise lowering sees inside a fused kernel (``FusedCtx``, ``LoopState``).

This file imports nothing: ``group`` is read by the registry and the partitioner, and must not pull
in the emitter (which imports the registry) when they import it.
"""
