"""Everything TorchTitan 0.3 needs that a CPU box lacks, set up in one call before it loads.

- its device: the CPU (cpu_device.py), not "cuda";
- triton, imported at module level by kernel files every model pulls in (triton_stub.py);
- attention: flex attention has no CPU backward; eager math in its place (attention.py);
- under `--compute fake`, the scalars TorchTitan only observes (logged loss, grad norm, the
  broadcast seed) read as 0, and weight init draws nothing, instead of forcing real compute
  (fake_values.py);
- pipeline schedules: `step` called with microbatch lists (TorchTitan 0.3's convention,
  newer than torch 2.13's whole-batch `step`; pipeline_step.py);
- `--comm.mode local_tensor` inside commtrace's local mode: TorchTitan uses the LocalTensorMode
  already open instead of nesting a second one (local_tensor.py);
- CUDA-only kernels (TorchTitan's `torchtitan::silu_and_mul` custom op) and torch's CPU fused
  Adam without bf16 optimizer states (`fused_opt_states_bf16`): CPU versions (cpu_kernels.py);
- hardware checks that decide communication (float8's SM89+) answered as an H100 (cpu_device.py);
- `torch.distributed.set_timeout` (newer than torch 2.13; TorchTitan 0.3 calls it after the
  first step): a no-op where torch lacks it, since a dry run never waits on a timeout;
"""

from __future__ import annotations


def prepare() -> None:
    """What importing and parsing TorchTitan needs (the CLI's check does only this); call
    before importing anything of TorchTitan but its tools."""
    from tracer.adapters.torchtitan import cpu_device, triton_stub

    triton_stub.install()
    cpu_device.install()
    cpu_device.install_capability()  # TorchTitan's config build already checks float8's SM89


def prepare_rank() -> None:
    """prepare() and what training needs, in a rank's process only (it changes torch itself)."""
    prepare()
    import torch.distributed as dist

    from tracer.adapters.torchtitan import attention, cpu_kernels, fake_values, local_tensor, pipeline_step

    if not hasattr(dist, "set_timeout"):
        dist.set_timeout = _set_timeout
    attention.install()
    pipeline_step.install()
    local_tensor.install()
    fake_values.install()
    cpu_kernels.install_fused_adam()


def _set_timeout(timeout, group=None) -> None:
    """torch.distributed.set_timeout for a torch that lacks it: nothing to do in a dry run."""
