"""From a TorchTitan job to what `tracer.record.pipeline.record` runs: the program, the mode, the
header snapshot. Kept apart from the CLI so tests and bench/ plan jobs the same way."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass

from tracer.adapters.torchtitan import version
from tracer.adapters.torchtitan.entry import TWIN_FLAG
from tracer.adapters.torchtitan.job import (
    ENTRYPOINT,
    TorchTitanError,
    TorchTitanJob,
    check,
    spmd_types_fsdp_gap,
)
from tracer.program import Program

COMM_MODES = {"fake_backend": "fake", "local_tensor": "local"}
"""TorchTitan's comm.mode -> the commtrace mode it runs in."""


@dataclass(kw_only=True, slots=True)
class Plan:
    program: Program
    """What every rank runs: ENTRYPOINT with the job's arguments."""
    mode: str
    """"fake" (a process per rank) or "local" (one process, LocalTensorMode)."""
    config: dict = field(default_factory=dict)
    """Snapshot for the trace header: module, config, version, arguments."""
    notes: list[str] = field(default_factory=list)
    """What the recording does differently from a GPU run, one line each (printed as notes)."""


def plan(job: TorchTitanJob, *, world_size: int | None, mode: str | None, twin_of_dp: int = 0) -> Plan:
    """Check the job (TorchTitanError, one line, on bad input) and choose the mode: `mode` as
    asked, else local when TorchTitan's own comm.mode is local_tensor, else fake. `twin_of_dp`:
    a numerics twin's dp degree ([tracer] twin_of_dp: the synthetic tokens of that many dp ranks at
    once, synthetic_data.py), passed to the entrypoint as its own last argument."""
    if world_size is None:
        raise TorchTitanError("give the number of simulated ranks: -n N (or [tracer] world_size)")
    if world_size < 1:
        raise TorchTitanError(f"--world-size must be at least 1, got {world_size}")
    comm = job.comm_mode()
    if comm not in COMM_MODES:
        raise TorchTitanError(f"comm.mode {comm!r} cannot be simulated: use fake_backend or local_tensor")
    mode = mode or COMM_MODES[comm]
    if mode == "fake" and comm == "local_tensor":
        raise TorchTitanError("comm.mode local_tensor runs every rank in one process: use --mode local")
    for key in ("parallelism.enable_fsdp_symm_mem", "parallelism.enable-fsdp-symm-mem"):
        if job.option(key) is not None or f"--{key}" in job.overrides:
            raise TorchTitanError(
                "parallelism.enable_fsdp_symm_mem: FSDP over CUDA symmetric memory (NVSHMEM buffers) "
                "has no CPU version to simulate; record without it (the same all-gathers and reduce-scatters)"
            )
    cfg = check(job)
    _check_degrees(cfg, world_size)
    _check_backend(cfg, world_size)
    _check_modules(cfg)
    snapshot = {
        "torchtitan": {
            "module": job.module,
            "config": job.config,
            "version": version.installed(),
            "overrides": job.overrides,
            "comm_mode": comm,
            "spmd_backend": cfg.parallelism.spmd_backend,
        }
    }
    notes = _async_tp_notes(cfg)
    if notes:
        snapshot["torchtitan"]["notes"] = notes
    return Plan(
        program=Program(entrypoint=ENTRYPOINT, args=job.args + ([TWIN_FLAG, str(twin_of_dp)] if twin_of_dp else [])),
        mode=mode,
        config=snapshot,
        notes=notes,
    )


def _check_degrees(cfg, world_size: int) -> None:
    """TorchTitan checks its degrees against the world size only on the ranks: do it here."""
    p = cfg.parallelism
    degrees = {
        k: getattr(p, k)
        for k in (
            "data_parallel_replicate_degree",
            "data_parallel_shard_degree",
            "context_parallel_degree",
            "tensor_parallel_degree",
            "pipeline_parallel_degree",
        )
    }
    fixed = 1
    for d in degrees.values():
        if d != -1:
            fixed *= d
    if degrees["data_parallel_shard_degree"] == -1:
        if world_size % fixed:
            raise TorchTitanError(f"parallelism degrees {fixed} do not divide the world size {world_size}")
    elif fixed != world_size:
        raise TorchTitanError(f"parallelism degrees multiply to {fixed}, but the world size is {world_size}")


def _check_backend(cfg, world_size: int) -> None:
    """spmd_types asked for (the adapter falls back to partial_dtensor only on its own) on a
    torch whose FSDP cannot take it: one line here, not a failed rank per process."""
    p = cfg.parallelism
    dense = world_size // max(1, p.pipeline_parallel_degree)  # TorchTitan's FSDP storage mesh
    gap = spmd_types_fsdp_gap() if p.spmd_backend == "spmd_types" and dense > 1 else None
    if gap:
        raise TorchTitanError(
            f"spmd_backend spmd_types: {gap}; drop --parallelism.spmd_backend to record with "
            "partial_dtensor (the same collectives through DTensor), or use a newer torch"
        )


CUDA_ONLY_MODULES = {
    "HybridEPTokenDispatcher": "moe_comm_backend hybridep: DeepEP's HybridEP kernels (the deep_ep package, "
    "NVLink / RDMA buffers) are CUDA-only, with no CPU version to simulate; record with the default EP all-to-all",
    "DeepEPTokenDispatcher": "moe_comm_backend deepep: DeepEP's kernels (the deep_ep package, NVSHMEM buffers) "
    "are CUDA-only, with no CPU version to simulate; record with the default EP all-to-all",
    "MinimalAsyncEPTokenDispatcher": "moe_comm_backend minimal_async_ep: its all-to-allv runs over CUDA "
    "symmetric memory, which has no CPU version to simulate; record with the default EP all-to-all",
}
"""Model components (by their config's class) whose communication has no CPU version."""


def _check_modules(cfg) -> None:
    """Model components the installed torch or a CPU cannot run, found in the model's config
    tree (TorchTitan builds them only on the ranks): one line here, not a failed rank."""
    names = {f"{t.__module__}.{t.__qualname__}" for t in _config_types(cfg.model_spec, set())}
    for name in sorted(names):
        for part, why in CUDA_ONLY_MODULES.items():
            if f".{part}." in f".{name}":
                raise TorchTitanError(why)
    gap = spmd_types_fsdp_gap()
    if gap and any(n.startswith("torchtitan.models.common.dist_gemm.") for n in names):
        raise TorchTitanError(
            f"tp_gemm_backend dist_gemm runs only under spmd_backend spmd_types (its fused modules take "
            f"plain local tensors), and {gap}"
        )


def _config_types(o, seen: set[int], depth: int = 0):
    """The classes of every object in a config tree (dataclasses, lists, dicts)."""
    if id(o) in seen or depth > 16 or isinstance(o, (str, bytes, int, float, bool, type(None), type)):
        return
    seen.add(id(o))
    yield type(o)
    if isinstance(o, (list, tuple, set)):
        items = list(o)
    elif isinstance(o, dict):
        items = list(o.values())
    elif is_dataclass(o):
        items = [getattr(o, f.name, None) for f in fields(o)]
    else:
        items = list(getattr(o, "__dict__", {}).values())
    for x in items:
        yield from _config_types(x, seen, depth + 1)


ASYNC_TP_UNFUSED = (
    "async TP recorded unfused: torch's micro-pipeline TP pass (inductor) fuses only with NCCL and "
    "CUDA symmetric memory, which a CPU build lacks; on a GPU each TP all-gather feeding a matmul and "
    "each reduce-scatter fed by one run as symm_mem fused_all_gather_matmul / fused_matmul_reduce_scatter "
    "(not NCCL collectives); the rest of the pattern is 2d compile's (docs/torchtitan.md)"
)


def _async_tp_notes(cfg) -> list[str]:
    """--compile.enable_async_tensor_parallel with TP: what the CPU recording cannot show."""
    import torch.distributed as dist

    c, p = cfg.compile, cfg.parallelism
    if c.enable and c.enable_async_tensor_parallel and p.tensor_parallel_degree > 1 and not dist.is_nccl_available():
        return [ASYNC_TP_UNFUSED]
    return []
