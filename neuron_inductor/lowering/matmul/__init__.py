"""GEMM kernels on TensorE, with the pointwise epilogue the partitioner fused after them.

* ``gemm``: ``mm`` / ``bmm`` with its epilogue, registered for both ops: checks the case, plans it
  (``plan``: ``GemmPlan``, the resident-lhs tile plan) and emits it (``emitter``: ``GemmEmitter``);
* ``skinny``: at most 8 rows per batch entry (decode GEMVs): a small stationary lhs^T against
  512-column moving tiles, one-row bmms with their heads on the output partitions;
* ``operands``: operand access patterns every GEMM lowering reads its operands through;
* ``kstream``: deep-K GEMMs with K outermost and the rhs read once, and the whole-rhs-resident plan;
* ``epilogue``: the epilogue's row-invariant operands (a bias) loaded once per kernel;
* ``multi``: sibling GEMMs sharing one epilogue (a SwiGLU's gate and up projections);
* ``rows``: a GEMM inside the row loop of a fused group that reduces its rows (an RMSNorm).

Importing a module registers its lowerings; ``lowering/__init__.py`` imports them all. This file
imports nothing, so a module of the package can be imported without the others.
"""
