"""Triangular solves as unrolled substitution over ops the kernels already have.

``linalg_solve_triangular`` solves ``A X = B`` for a triangular ``A [..., n, n]``. Shapes are static,
so the substitution is unrolled. After dividing every row by its diagonal (``A = D (I + N)``, ``N``
strictly triangular) the column-oriented form updates the residual ``r = D^-1 B`` with
``r -= N[..., :, j] * r[..., j, :]`` for each column ``j`` in solve order; row ``j`` of ``r`` is final
once column ``j`` has been applied, so the last residual *is* ``X`` (one broadcast multiply-subtract
per step, no concatenation). Systems larger than ``BLOCK`` are solved blocked, as LAPACK's ``trsm``
does: all diagonal blocks are inverted together by that substitution (``BLOCK - 1`` steps on a batch
of blocks), then each block row takes one matmul for the update from the solved blocks and one with
its block's inverse. At n = 64 that halves the kernel count of the plain sweep.

Why not a faster doubling inverse (``(I + N)^-1 = prod_k (I + (-N)^(2^k))``, log2(n) matmuls): it
sums the Neumann series, whose terms grow like binomial coefficients when the rows of ``N`` are
alike (the gated delta rule's ``ut_system`` with similar keys, beta near 1 and little decay is
exactly that: its inverse is small but ``N^k`` reaches ~1e17 at n = 64) and fp32 cancels to noise.
Substitution only ever sums terms of the solution's own size, like LAPACK's ``trsm``.

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
# diagonal block size of the blocked sweep: BLOCK - 1 substitution steps + 2 matmuls per block
BLOCK = 16


def _strict_mask(n: int, upper: bool, device) -> torch.Tensor:
    """The strictly upper / lower triangle (diagonal excluded) of an ``n x n`` matrix."""
    rows = torch.arange(n, device=device).unsqueeze(-1)
    cols = torch.arange(n, device=device).unsqueeze(0)
    return torch.lt(rows, cols) if upper else torch.gt(rows, cols)


def _substitute(strict: torch.Tensor, r: torch.Tensor, upper: bool) -> torch.Tensor:
    """Solve ``(I + strict) x = r`` column by column; the last residual is ``x``."""
    n = strict.shape[-1]
    order = range(n - 1, 0, -1) if upper else range(n - 1)  # the last column in solve order is empty
    for j in order:
        r = r - strict[..., :, j:j + 1] * r[..., j:j + 1, :]
    return r


def _blocked(strict: torch.Tensor, r: torch.Tensor, upper: bool) -> torch.Tensor:
    """Blocked substitution: invert all diagonal ``BLOCK x BLOCK`` blocks at once (one batched
    substitution on the identity), then sweep the blocks, each one matmul for the update from the
    solved blocks and one with the block's inverse. ``n`` is padded to a block multiple with an
    identity tail (zero ``strict``, zero right-hand side), whose solution is zero and dropped."""
    n = strict.shape[-1]
    nb = -(-n // BLOCK)
    pad = nb * BLOCK - n
    if pad:
        strict = torch.nn.functional.pad(strict, (0, pad, 0, pad))
        r = torch.nn.functional.pad(r, (0, 0, 0, pad))
    span = [slice(i * BLOCK, (i + 1) * BLOCK) for i in range(nb)]
    diag = torch.stack([strict[..., s, s] for s in span], dim=-3)  # [..., nb, B, B]
    eye = torch.eye(BLOCK, dtype=strict.dtype, device=strict.device)
    inv = _substitute(diag, eye.expand(diag.shape), upper)
    solved: dict[int, torch.Tensor] = {}
    for i in (range(nb - 1, -1, -1) if upper else range(nb)):
        rhs = r[..., span[i], :]
        if solved:
            done = sorted(solved)
            cols = torch.cat([strict[..., span[i], span[j]] for j in done], dim=-1)
            rhs = rhs - torch.matmul(cols, torch.cat([solved[j] for j in done], dim=-2))
        solved[i] = torch.matmul(inv[..., i, :, :], rhs)
    x = torch.cat([solved[i] for i in range(nb)], dim=-2)
    return x[..., :n, :] if pad else x


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
    if n < 2:
        return r.to(b.dtype).clone()
    x = _blocked(strict, r, upper) if n > BLOCK else _substitute(strict, r, upper)
    return x.to(b.dtype)


def solve_triangular(a: torch.Tensor, b: torch.Tensor, *, upper: bool, left: bool = True,
                     unitriangular: bool = False) -> torch.Tensor:
    """``torch.linalg.solve_triangular`` by unrolled substitution (NotImplemented above ``MAX_N``)."""
    if a.is_complex() or b.is_complex() or a.dim() < 2 or b.dim() < 2 or a.shape[-1] > MAX_N:
        return NotImplemented
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return _solve_left(a.mT, b.mT, not upper, unitriangular).mT
    return _solve_left(a, b, upper, unitriangular)


DECOMPOSITIONS[aten.linalg_solve_triangular.default] = solve_triangular
