"""One test of TorchTitan 0.3's integration lists (`tests/integration_tests/{features,models,
h100}.py` on its release/0.3 branch), as titan_features.py, titan_models.py and titan_h100.py
transcribe them: name, override variants in TorchTitan's spelling, ngpu, disabled reason."""

from __future__ import annotations

from dataclasses import dataclass, field

DCG = "--training.disable_cuda_graphs"
PP = "--parallelism.pipeline_parallel_degree"
DP = "--parallelism.data_parallel_shard_degree"
REP = "--parallelism.data_parallel_replicate_degree"
TP = "--parallelism.tensor_parallel_degree"
CP = "--parallelism.context_parallel_degree"
EP = "--parallelism.expert_parallel_degree"
SCHED = "--parallelism.pipeline_parallel_schedule"


@dataclass(frozen=True, slots=True)
class Case:
    suite: str
    """features, models or h100 (TorchTitan's --test_suite)."""
    name: str
    """TorchTitan's test_name."""
    variants: tuple[tuple[str, ...], ...]
    """Each run's overrides, in TorchTitan's spelling (one string may hold several tokens)."""
    ngpu: int = 4
    """World size (TorchTitan's default 4)."""
    disabled: str = ""
    """Why TorchTitan itself disables the test ("" when it runs in TorchTitan's CI)."""
    typecheck: bool = True
    """Whether TorchTitan's build function may add spmd typechecking (h100 does not)."""
    module: str = "llama3"
    config: str = "llama3_debugmodel"
    extra: dict = field(default_factory=dict)


def _v(*args: str) -> tuple[str, ...]:
    return tuple(args)
