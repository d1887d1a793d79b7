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
- context parallel on a pipeline stage without attention blocks: nothing to wrap (TorchTitan's
  partial_dtensor path indexed the empty list);
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
    _cp_on_layerless_stages()


def _cp_on_layerless_stages() -> None:
    """TorchTitan 0.3's `apply_cp_to_forward` reads its first attention module, so a pipeline
    stage with no attention block (gpt_oss pp 2 x cp 2: the last stage holds only the norm and
    head) raises IndexError under partial_dtensor, the backend a torch without spmd_types FSDP
    runs (job.py); spmd_types applies CP per module and has nothing to do there. So does this:
    no modules, no CP wrapping. Patched where the models' parallelize files import it from."""
    import importlib

    for name in ("torchtitan.distributed.context_parallel", "torchtitan.distributed.context_parallel.api"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            return
        orig = getattr(mod, "apply_cp_to_forward", None)
        if orig is None or getattr(orig, "__commtrace_layerless__", False):
            continue

        def apply_cp_to_forward(attention_modules, cp_mesh, _orig=orig) -> None:
            if len(attention_modules) == 0:
                return
            _orig(attention_modules, cp_mesh)

        apply_cp_to_forward.__commtrace_layerless__ = True  # type: ignore[attr-defined]
        setattr(mod, "apply_cp_to_forward", apply_cp_to_forward)  # noqa: B010  # a module found at run time


def _set_timeout(timeout, group=None) -> None:
    """torch.distributed.set_timeout for a torch that lacks it: nothing to do in a dry run."""
