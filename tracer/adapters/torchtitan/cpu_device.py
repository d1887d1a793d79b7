"""TorchTitan's accelerator, played by the CPU.

TorchTitan 0.3 picks its device once, at import of `torchtitan.tools.utils`
(`device_type = _get_available_device_type() or "cuda"`), and the modules that need it copy
`device_type` / `device_module` by name when they are imported. On a CPU box that is "cuda"
with `torch.cuda`, whose calls fail. `install()` runs before any other TorchTitan module is
imported and makes it "cpu" with `CpuDeviceModule`: the torch.cuda-like calls TorchTitan
makes (set_device, memory stats for its memory monitor, synchronize, ...) answered for a CPU,
and its local device `cpu`.
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass

import torch


@dataclass(kw_only=True, slots=True)
class _Properties:
    name: str
    """What TorchTitan logs as the device name."""
    total_memory: int
    """Bytes of RAM: TorchTitan's memory monitor reports percentages of it."""


class CpuDeviceModule:
    """The `device_module` TorchTitan calls (torch.cuda's names), for the CPU. Memory stats are
    empty: a dry run's peak memory is not the GPU's, so TorchTitan logs -1 (its 'unknown')."""

    def __getattr__(self, name: str):  # anything else torch.cpu has (Stream, synchronize, ...)
        return getattr(torch.cpu, name)

    @staticmethod
    def set_device(device) -> None:
        pass

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def get_device_name(device=None) -> str:
        return platform.processor() or platform.machine() or "cpu"

    @staticmethod
    def get_device_properties(device=None) -> _Properties:
        try:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            total = 1 << 34
        return _Properties(name=CpuDeviceModule.get_device_name(), total_memory=total)

    @staticmethod
    def memory_stats(device=None) -> dict:
        return {}

    @staticmethod
    def reset_peak_memory_stats(device=None) -> None:
        pass

    @staticmethod
    def empty_cache() -> None:
        pass

    @staticmethod
    def synchronize(device=None) -> None:
        pass


def _local_device() -> torch.device:
    return torch.device("cpu")


def install() -> None:
    """Make TorchTitan's device the CPU; must run before TorchTitan's other modules load
    (once per process: a second call finds it done)."""
    tt_utils = sys.modules.get("torchtitan.tools.utils")
    if tt_utils is not None and isinstance(tt_utils.device_module, CpuDeviceModule):
        return
    loaded = [m for m in ("torchtitan.trainer", "torchtitan.distributed.utils") if m in sys.modules]
    if loaded:
        raise RuntimeError(f"{loaded[0]} was imported before the CPU device was set up")
    import torchtitan.tools.utils as tt_utils

    tt_utils.device_type, tt_utils.device_module = "cpu", CpuDeviceModule()
    # "cpu", not "cpu:0": tensors TorchTitan moves to its device meet tensors made on "cpu", and
    # fake compute (FakeTensor) refuses to mix the two spellings of the same device
    tt_utils.get_local_device = _local_device


H100_CAPABILITY = (9, 0)
"""The CUDA compute capability a dry run answers with: an H100's (SM90), TorchTitan's CI GPU."""

CAPABILITY_CHECKS = ("torchtitan.components.quantization.float8",)
"""TorchTitan modules whose hardware check (`has_cuda_capability`, imported by name) decides what
the job communicates: float8 needs SM89+ (float8 all-gathers, amax all-reduces). Answered as an
H100 would. Not `torchtitan.tools.utils` itself: its FlashAttention pick would then choose FA3
kernels, which are compute, not communication, and have no CPU version. MX and NVFP4 ask for
SM100 (Blackwell), which an H100 is not: refused by TorchTitan there, as on an H100."""


def has_cuda_capability(major: int, minor: int) -> bool:
    """TorchTitan's `has_cuda_capability`, answered as an H100 would."""
    return H100_CAPABILITY >= (major, minor)


def install_capability() -> None:
    """Point the modules of CAPABILITY_CHECKS at `has_cuda_capability` (imports them)."""
    import importlib

    for name in CAPABILITY_CHECKS:
        try:
            mod = importlib.import_module(name)
        except ImportError:  # a TorchTitan without it (or without its dependencies): nothing to answer
            continue
        if hasattr(mod, "has_cuda_capability"):
            mod.has_cuda_capability = has_cuda_capability
