"""Triangular solves as unrolled substitution over ops the kernels already have.

``linalg_solve_triangular`` solves ``A X = B`` for a triangular ``A [..., n, n]``. Shapes are static,
so the substitution is unrolled over the ``n`` columns of ``A`` in its column-oriented form: after
dividing every row by its diagonal (``A = D (I + N)``, ``N`` strictly triangular), the residual
``r = D^-1 B`` is updated ``r -= N[..., :, j] * r[..., j, :]`` for each column ``j`` in solve order.
Row ``j`` of ``r`` is final once column ``j`` has been applied (later columns are zero there), so the
last residual *is* ``X``: every step is one broadcast multiply-subtract over the whole tile, no
concatenation and no matmul.

Why not a faster doubling inverse (``(I + N)^-1 = prod_k (I + (-N)^(2^k))``, log2(n) matmuls): it
sums the Neumann series, whose terms grow like binomial coefficients when the rows of ``N`` are
alike (the gated delta rule's ``ut_system`` with similar keys, beta near 1 and little decay is
exactly that: its inverse is small but ``N^k`` reaches ~1e17 at n = 64) and fp32 cancels to noise.
Substitution is what LAPACK's ``trsm`` does, with the same rounding behaviour.

The work is done in float32 (bf16 accumulating ``n`` updates would drift; eager has no bf16 solve on
CPU at all). Above ``MAX_N`` the unrolled graph grows too large, so the op stays a declared fallback,
as do complex inputs. ``left=False`` is the transposed left solve. The backward of the op is
autograd's, written with ``solve_triangular`` again, so it reaches this decomposition too."""
from __future__ import annotations

import torch

aten = torch.ops.aten

DECOMPOSITIONS: dict = {}

# unrolled steps per solve: the chunked gated delta rule uses n = 64
MAX_N = 128


def _strict_mask(n: int, upper: bool, device) -> torch.Tensor:
    """The strictly upper / lower triangle (diagonal excluded) of an ``n x n`` matrix."""
    rows = torch.arange(n, device=device).unsqueeze(-1)
    cols = torch.arange(n, device=device).unsqueeze(0)
    return torch.lt(rows, cols) if upper else torch.gt(rows, cols)


def _solve_left(a: torch.Tensor, b: torch.Tensor, upper: bool, unitriangular: bool) -> torch.Tensor:
    n = a.shape[-1]
    af, bf = a.float(), b.float()
    strict = torch.where(_strict_mask(n, upper, a.device), af, 0.0)
    if not unitriangular:
        diag = torch.diagonal(af, dim1=-2, dim2=-1).unsqueeze(-1)  # [..., n, 1]
        strict = strict / diag
        bf = bf / diag
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    r = bf.expand(batch + b.shape[-2:])
    order = range(n - 1, 0, -1) if upper else range(n - 1)  # the last column in solve order is empty
    for j in order:
        r = r - strict[..., :, j:j + 1] * r[..., j:j + 1, :]
    return r.to(b.dtype) if len(order) else r.to(b.dtype).clone()


def solve_triangular(a: torch.Tensor, b: torch.Tensor, *, upper: bool, left: bool = True,
                     unitriangular: bool = False) -> torch.Tensor:
    """``torch.linalg.solve_triangular`` by unrolled substitution (NotImplemented above ``MAX_N``)."""
    if a.is_complex() or b.is_complex() or a.dim() < 2 or b.dim() < 2 or a.shape[-1] > MAX_N:
        return NotImplemented
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return _solve_left(a.mT, b.mT, not upper, unitriangular).mT
    return _solve_left(a, b, upper, unitriangular)


DECOMPOSITIONS[aten.linalg_solve_triangular.default] = solve_triangular
