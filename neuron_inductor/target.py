"""Hardware capabilities as data.

Passes, the verifier, the simulator and the cost model read limits from a ``Target``; nothing in the
compiler branches on a target's name.  Numbers come from the public AWS Neuron documentation (the NKI
memory hierarchy, the Trainium/Trainium2 architecture pages and the ``nki.isa`` instruction
cost notes); where the public sources disagree the conservative value is used and the choice is noted.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str
    #: partitions of SBUF / PSUM (the tile's first axis)
    partitions: int
    #: usable SBUF bytes per partition (trn1 reserves 16 KiB of 192 KiB for the compiler)
    sbuf_bytes_per_partition: int
    #: PSUM bytes per partition and its banks (one matmul accumulation group per bank)
    psum_bytes_per_partition: int
    psum_banks: int
    #: TensorE limits: stationary [K<=128, M<=128], moving [K<=128, N<=512]
    matmul_k_max: int
    matmul_m_max: int
    matmul_n_max: int
    #: bn_stats input free size limit
    bn_stats_fmax: int
    # --- rates for the cost model ---
    tensor_clock_hz: float
    vector_clock_hz: float
    scalar_clock_hz: float
    gpsimd_clock_hz: float
    #: HBM bandwidth available to one NeuronCore, bytes/s
    hbm_bytes_per_s: float
    #: DMA engines per NeuronCore and bytes/s each
    dma_engines: int
    dma_engine_bytes_per_s: float
    #: fixed cost of one DMA transfer, seconds
    dma_fixed_s: float
    #: peak dense bf16 TensorE FLOP/s of one NeuronCore
    peak_bf16_flops: float
    #: hardware has no 64-bit integer or float types
    has_64bit: bool = False
    #: VectorE elements per cycle across all partitions (nki.md §5.2): trn1 128 (one per lane);
    #: trn2 "256 for other dtypes" (fp32, and bf16 operations outside the perf modes)
    vector_elems_per_cycle: int = 128
    #: VectorE perf mode for SBUF-contiguous bf16/fp16 tensor_copy / tensor_scalar (nki.md §5.2,
    #: trn2 "512 elems/cycle for BF16/FP16 ... 4x"); trn2 tensor_tensor bf16 "2x" equals the 256 above
    vector_bf16_perf_elems_per_cycle: int = 128
    #: NeuronCore generation (``nisa.nc_version``): 2 = trn1/inf2, 3 = trn2; instruction rules that
    #: differ per generation (neuron_inductor.spec) key on it
    nc_version: int = 3

    @property
    def psum_bank_bytes(self) -> int:
        return self.psum_bytes_per_partition // self.psum_banks

    @property
    def psum_bank_fp32(self) -> int:
        return self.psum_bank_bytes // 4


TRN1 = Target(
    name="trn1",
    partitions=128,
    sbuf_bytes_per_partition=176 * 1024,
    psum_bytes_per_partition=16 * 1024,
    psum_banks=8,
    matmul_k_max=128,
    matmul_m_max=128,
    matmul_n_max=512,
    bn_stats_fmax=512,
    tensor_clock_hz=2.8e9,
    vector_clock_hz=1.12e9,
    scalar_clock_hz=1.4e9,
    gpsimd_clock_hz=1.4e9,
    hbm_bytes_per_s=410e9,
    dma_engines=16,
    dma_engine_bytes_per_s=17e9,
    dma_fixed_s=1.3e-6,
    peak_bf16_flops=91.75e12,
    nc_version=2,
)

TRN2 = Target(
    name="trn2",
    partitions=128,
    sbuf_bytes_per_partition=208 * 1024,  # 212984 B usable per KLR, rounded down to a KiB
    psum_bytes_per_partition=16 * 1024,
    psum_banks=8,
    matmul_k_max=128,
    matmul_m_max=128,
    matmul_n_max=512,
    bn_stats_fmax=512,
    tensor_clock_hz=2.4e9,
    vector_clock_hz=0.96e9,
    scalar_clock_hz=1.2e9,
    gpsimd_clock_hz=1.2e9,
    hbm_bytes_per_s=362e9,
    dma_engines=16,
    dma_engine_bytes_per_s=23e9,
    dma_fixed_s=1.3e-6,
    peak_bf16_flops=78.6e12,
    vector_elems_per_cycle=256,
    vector_bf16_perf_elems_per_cycle=512,
)

#: the module-level name under which a generated kernel module records the target it was compiled
#: for (``PLATFORM_TARGET = "trn2"``): the simulator checks that target's rules and limits, the device
#: path passes it to the NKI compiler as ``NEURON_PLATFORM_TARGET_OVERRIDE``
KERNEL_TARGET_NAME = "PLATFORM_TARGET"

TARGETS: dict[str, Target] = {t.name: t for t in (TRN1, TRN2)}


def get_target(name: str | None = None) -> Target:
    """The target named, else ``$NEURON_INDUCTOR_TARGET``, else trn2 (the current generation)."""
    name = name or os.environ.get("NEURON_INDUCTOR_TARGET") or "trn2"
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown Neuron target {name!r}; valid targets: {sorted(TARGETS)}") from None


def common_limit(field: str) -> int:
    """A limit every target shares (``partitions``, ``matmul_n_max``...), for kernels whose tiling is
    fixed at module level (flash attention's 128-row tiles and 512-column score banks)."""
    values = {getattr(t, field) for t in TARGETS.values()}
    if len(values) != 1:
        raise ValueError(f"targets differ in {field}: {sorted(values)}")
    return values.pop()
