"""Hardware capabilities as data.

Passes, the verifier, the simulator and the cost model read limits from a ``Target``; nothing in the
compiler branches on a target's name.  Numbers come from the public AWS Neuron documentation (the NKI
memory hierarchy, the Trainium/Trainium2/Trainium3 architecture pages and the ``nki.isa`` instruction
cost notes); where the public sources disagree the conservative value is used and the choice is noted.
docs/targets.md lists every target's numbers with their sources.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace


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
    #: VectorE elements per cycle across all partitions (docs/hardware.md): trn1 128 (one per lane);
    #: trn2 "256 for other dtypes" (fp32, and bf16 operations outside the perf modes)
    vector_elems_per_cycle: int = 128
    #: VectorE perf mode for SBUF-contiguous bf16/fp16 tensor_copy / tensor_scalar (docs/hardware.md,
    #: trn2 "512 elems/cycle for BF16/FP16 ... 4x"); trn2 tensor_tensor bf16 "2x" equals the 256 above
    vector_bf16_perf_elems_per_cycle: int = 128
    #: NeuronCore generation (``nisa.nc_version``): 2 = trn1/inf2, 3 = trn2, 4 = trn3; instruction
    #: rules that differ per generation (neuron_inductor.spec) key on it
    nc_version: int = 3
    #: TensorE cycles each matmul pass costs beyond the documented ``max(N_moving, 64)`` (an fp32
    #: matmul is 4 passes). Measured on trn1 (benchmarks/calibrate.py): fp32 85 from NKIBench's
    #: transpose_matmul (zhang677/AccelOpt, neuron-profile: 11,264 fp32 [128x128]x[128x512] matmuls
    #: and nothing else in 9.61 ms, 2,389 cycles each against 4 x 512 documented); bf16 61 from the
    #: NKI matmul tutorial's fully blocked kernel (6.97 ms published against 6.22 ms at 512 cycles
    #: per matmul). A fixed cost per pass, not a rate: it weighs most on small matmuls (the 128-column
    #: fp32 transposes of gqa_full). trn2 and later inherit these cycle counts: the PE array and its
    #: instruction issue are the same design at a different clock, and no per-matmul trn2
    #: measurement is public.
    tensor_pass_overhead_fp32: int = 85
    tensor_pass_overhead_bf16: int = 61
    #: HBM efficiency lost to mixing reads and writes: DMA traffic with write share ``w`` runs at
    #: ``1 - penalty * min(w, 1 - w)`` of the one-way rate. Measured on trn1 (NKIBench profiles,
    #: benchmarks/calibrate.py): silu (half reads, half writes) moves 176 GB/s where matmul (2%
    #: writes) moves 263 GB/s and bmm (94% writes) 250 GB/s through the same 2-4 KiB descriptors:
    #: penalty 0.67. HBM turnaround is a DRAM property, so trn2/trn3 inherit the ratio.
    hbm_rw_mix_penalty: float = 0.67

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

#: Trainium3, NeuronCore-v4. Sources: aws-neuron-sdk ``nki/guides/architecture/trainium3_arch.rst``
#: ("Trainium3 Architecture Guide for NKI": SBUF 32 MiB, PSUM "remains the same at 2 MiB", the
#: engine table: Tensor 2.4 GHz with 2x128 non-MX dense input, Vector 1.2 GHz at 512 BF16/FP16/FP8
#: and 256 other elements/cycle, Scalar and GpSimd 1.2 GHz; 4.7 TB/s HBM for 8 NeuronCores; 79 BF16
#: TFLOPS per Tensor Engine) and ``about-neuron/arch/neuron-hardware/trainium3.rst`` (DMA 4.9 TB/s
#: against Trainium2's 3.5). Fields those pages do not give (DMA fixed cost, bn_stats limit, the
#: TensorE 128x128 tile limits: the v4 ``nc_matmul`` docstring keeps K, M <= 128) are TRN2's, so a
#: recalibrated TRN2 constant carries over. The v4 ISA lets ``nc_matmul`` stream up to 4096 fp32
#: columns (8 PSUM banks, spec/ knows); the tile planners keep one 512-column bank per matmul on
#: every target, so ``matmul_n_max`` stays 512 (``common_limit``).
TRN3 = replace(
    TRN2,
    name="trn3",
    # 128 partitions x 256 KiB (32 MiB); 16 KiB per partition reserved for the compiler as on trn1
    # (192 -> 176 KiB) and trn2 (224 -> 208 KiB: nki-library mlp_cte_constants.py
    # MAX_AVAILABLE_SBUF_SIZE = 224 KiB - 16384 B DynamicDMAScratch - 8 B EvalAccelReserved - ...)
    sbuf_bytes_per_partition=(256 - 16) * 1024,
    tensor_clock_hz=2.4e9,
    vector_clock_hz=1.2e9,
    scalar_clock_hz=1.2e9,
    gpsimd_clock_hz=1.2e9,
    # 4.7 TB/s over 8 NeuronCores (the NKI guide; trainium3.rst says 4.9: the lower figure is used)
    hbm_bytes_per_s=4.7e12 / 8,
    # per-engine DMA rate is undocumented: TRN2's, scaled by the chip's DMA bandwidth 4.9 / 3.5 TB/s
    dma_engine_bytes_per_s=TRN2.dma_engine_bytes_per_s * 4.9 / 3.5,
    nc_version=4,
)

#: the module-level name under which a generated kernel module records the target it was compiled
#: for (``PLATFORM_TARGET = "trn2"``): the simulator checks that target's rules and limits, the device
#: path passes it to the NKI compiler as ``NEURON_PLATFORM_TARGET_OVERRIDE``
KERNEL_TARGET_NAME = "PLATFORM_TARGET"

TARGETS: dict[str, Target] = {t.name: t for t in (TRN1, TRN2, TRN3)}


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
