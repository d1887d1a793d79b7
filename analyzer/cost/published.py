"""Published nccl-tests bus bandwidths the presets are calibrated to (docs/cost-model.md cites
each source). Sizes are bytes (the tables' "64M" is 2**26), busbw GB/s as nccl-tests prints it."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1 << 20
SIZES = tuple(MiB << i for i in range(14))
"""1 MiB .. 8 GiB, doubling: the rows every curve below gives."""


@dataclass(kw_only=True, slots=True, frozen=True)
class Curve:
    """One published all_reduce_perf (or other *_perf) run."""

    preset: str
    """The preset calibrated to it."""
    op: str
    """The collective (c10d's name)."""
    ranks: int
    """Ranks in the run."""
    nodes: int
    """Nodes they ran on."""
    busbw: tuple[float, ...]
    """busbw in GB/s per size of `sizes`."""
    sizes: tuple[int, ...] = SIZES
    """Message sizes (bytes) of `busbw`."""
    source: str
    """Where it was published (and which column: in-place / out-of-place)."""


CURVES: tuple[Curve, ...] = (
    Curve(
        preset="h200-dgx",
        op="all_reduce",
        ranks=8,
        nodes=1,
        busbw=(
            52.96,
            88.78,
            138.44,
            181.94,
            240.41,
            300.91,
            368.11,
            412.45,
            432.24,
            442.72,
            467.58,
            472.57,
            477.41,
            479.98,
        ),
        source="Azure/AI-benchmarking-guide Azure_Results/ND_H200_v5_results.md, NCCL 2.20.5, NVLS, in-place",
    ),
    Curve(
        preset="a100-dgx",
        op="all_reduce",
        ranks=8,
        nodes=1,
        busbw=(
            36.22,
            53.54,
            71.43,
            89.99,
            109.22,
            132.77,
            166.63,
            174.18,
            213.87,
            221.58,
            228.10,
            230.22,
            230.48,
            231.58,
        ),
        source="Azure/AI-benchmarking-guide Azure_Results/ND_A100_v4_results.md, NCCL 2.18.5, in-place",
    ),
    Curve(
        preset="gb200-nvl72",
        op="all_reduce",
        ranks=4,
        nodes=1,
        busbw=(
            80.48,
            110.43,
            146.27,
            253.46,
            331.09,
            422.62,
            550.73,
            574.19,
            593.53,
            618.74,
            646.87,
            666.63,
            673.06,
            679.61,
        ),
        source="Azure/AI-benchmarking-guide Azure_Results/ND_GB200_v6_results.md, NCCL 2.25.1, Ring, in-place, "
        "4 GPUs of one host",
    ),
    Curve(
        preset="h100-a3mega",
        op="all_reduce",
        ranks=16,
        nodes=2,
        busbw=(9.68, 15.48, 21.57, 27.50, 32.18, 59.36, 99.74, 152.32, 213.19, 263.69, 297.86, 318.40, 330.58, 338.82),
        source="github.com/lessizzmore/create-a3mega-ztan-fork ztan-NCCL-test-result: 2 nodes x 8 H100, out-of-place",
    ),
    Curve(
        preset="h100-dgx",
        op="all_reduce",
        ranks=8,
        nodes=1,
        sizes=(8 << 30,),
        busbw=(480.0,),
        source="NVIDIA/nccl-tests#212 (S. Jeaugey, NVIDIA): 'On 8 GPUs, you should reach a peak busBw of "
        "~480GB/s' (NVLS)",
    ),
    Curve(
        preset="h100-dgx",
        op="all_gather_into_tensor",
        ranks=8,
        nodes=1,
        sizes=(8 << 30,),
        busbw=(370.0,),
        source="NVIDIA/nccl-tests#212: 'NCCL can get an effective NVLink bandwidth of 370GB/s' (busbw of "
        "non-allreduce operations)",
    ),
)
"""Every published figure a preset is checked against (tests/analyze/test_cost_fit.py)."""
