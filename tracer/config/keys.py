"""Which TorchTitan keys the job config honours, ignores or refuses, and what a dry run records.

tracer/config/parse.py parses a TOML against its dataclasses; this module holds the tables that say
what to do with the keys it has no field for (TorchTitan keys that cannot change a comm
pattern: ignored; keys whose non-default values the built-in workload does not model: refused
in one line), the model flavor routing ([model] flavor expands to TorchTitan's dimensions) and
the dry-run length.
"""

from __future__ import annotations

import difflib

DRY_RUN_STEPS = 2
"""Steps a recording takes by default, whatever training.steps says: every later step repeats the
second one's pattern."""

# TorchTitan sections and keys that cannot change what is communicated: accepted, ignored.
IGNORED_SECTIONS = frozenset({"profiling", "lr_scheduler", "float8", "mx", "memory_estimation", "experimental"})
IGNORED_KEYS = {
    "job": {"config_file", "dump_folder", "description", "use_for_integration_test", "print_args", "print_config"},
    "model": {"tokenizer_path", "hf_assets_path", "print_after_conversion"},
    "optimizer": {"beta1", "beta2", "eps", "weight_decay", "implementation", "early_step_in_backward"},
    "training": {
        "dataset",
        "dataset_path",
        "global_batch_size",
        "seed",
        "deterministic",
        "gc_freq",
        "gc_debug",
        "compile",
        "enable_cpu_offload",
        "warmup_steps",
    },
    "parallelism": {"enable_compiled_autograd", "context_parallel_rotate_method"},
    "activation_checkpoint": {
        "preserve_rng_state",
        "determinism_check",
        "debug",
        "early_stop",
        "per_op_sac_force_recompute_mm_shapes_by_fqns",
        "memory_budget",  # only read in mode "memory_budget", which is refused
        "visualize_memory_budget_pareto",
    },
    "metrics": {
        "enable_tensorboard",
        "enable_wandb",
        "save_tb_folder",
        "save_for_all_ranks",
        "disable_color_printing",
        "enable_color_printing",
    },
    "compile": {"backend"},
    "quantize": {"grouped_mm"},  # float8 / mx of MoE grouped GEMMs: only read by converters that are refused
    "quantize.linear": {"mx"},  # only read by the "mx" converter, which is refused
    "comm": {"init_timeout_seconds", "train_timeout_seconds", "trace_buf_size", "save_traces_folder"},
}
UNMODELLED: dict[str, object] = {
    "parallelism.pipeline_parallel_split_points": [],
    "parallelism.pipeline_parallel_layers_per_stage": None,
    "parallelism.pipeline_parallel_schedule_csv": "",
    "parallelism.expert_tensor_parallel_degree": 1,
    "checkpoint.enable": False,
    "checkpoint.enable_checkpoint": False,
    "validation.enable": False,
    "fault_tolerance.enable": False,
}
"""TorchTitan keys that would change the comm pattern and that the built-in workload does not
model: accepted at their default (a real TorchTitan TOML often spells them out), refused
otherwise, so that no recording silently differs from what TorchTitan would run. Every other
key of these sections cannot change what is communicated."""
UNMODELLED_SECTIONS = frozenset({"checkpoint", "validation", "fault_tolerance"})


def refuse_unmodelled(section: str, values) -> None:
    for key, value in values.items() if isinstance(values, dict) else ():
        default = UNMODELLED.get(f"{section}.{key}", value)
        if value != default and not (default == [] and value in ((), None)):
            raise ValueError(
                f"{section}.{key} = {value!r} changes the comm pattern in ways the built-in workload "
                f"does not model (only {default!r} is accepted); record TorchTitan itself instead"
            )


def with_flavor(values: dict) -> dict:
    """The [model] keys with its flavor's dimensions first (keys given next to it win)."""
    from tracer.config.flavors import FLAVORS

    flavor, name = values.get("flavor"), values.get("name", "llama3")
    if flavor is None or name not in FLAVORS:  # another family: the TorchTitan adapter's business
        return values
    if not isinstance(flavor, str) or flavor not in FLAVORS[name]:
        raise ValueError(
            f"model.flavor: {flavor!r} is not a {name} flavor ({', '.join(FLAVORS[name])})"
            f"{did_you_mean(str(flavor), FLAVORS[name])}"
        )
    return {**FLAVORS[name][flavor], **values}


def did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
