"""Tiled Trainium IR: kernels (``nodes``) and the host program that runs them (``program``)."""
from .nodes import (DTYPE_BYTES, ENGINES, FLOAT_DTYPES, MEMORIES, OPCODES, Alloc, Dma, Expr, FrozenMap,
                    HBMAccess, HBMTensor, Instr, Kernel, Loop, LoopKind, NameGen, Operand, Stmt, Tile,
                    TileRegion, loop_var, walk)
from .program import (Collective, Empty, Fallback, KernelCall, Program, Ref, TensorMeta, UserKernelCall,
                      View, contiguous_strides)

__all__ = [n for n in dir() if not n.startswith("_")]
