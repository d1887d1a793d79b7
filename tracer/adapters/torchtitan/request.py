"""A TorchTitan job as a RecordRequest: `tracer record --torchtitan MODULE:CONFIG -- OVERRIDES`,
a TOML with `[job] torchtitan`, or a TorchTitan v0.2 train config of a model the built-in
workload is not (deepseek_v3, qwen3, ...), recorded by the installed TorchTitan. The [tracer]
section gives what the command line does not (tracer/record/options.pick); arguments after `--`
are more TorchTitan overrides. Bad input: TorchTitanError (a ValueError), one line.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from traceformat.ranks import parse_ranks
from tracer import config as config_mod
from tracer.adapters.torchtitan import version
from tracer.adapters.torchtitan.errors import TorchTitanError
from tracer.adapters.torchtitan.job import TorchTitanJob, toml_overrides
from tracer.adapters.torchtitan.job import from_spec as job_from_spec
from tracer.adapters.torchtitan.job import from_toml as job_from_toml
from tracer.adapters.torchtitan.plan import plan
from tracer.config.flavors import FLAVORS
from tracer.config.keys import DRY_RUN_STEPS
from tracer.modes import ALIASES
from tracer.record.compute import resolve as resolve_compute
from tracer.record.options import RecordOptions, pick
from tracer.record.request import RecordRequest

TRACER_KEYS = {"world_size", "ranks", "output", "compute", "steps", "numerics", "twin_of_dp"}
"""What [tracer] takes next to [job] torchtitan."""

# [parallelism] / [training] keys of a TorchTitan v0.2 TOML passed on to TorchTitan's trainer
PASSED_ON = {
    "parallelism": (
        "data_parallel_replicate_degree",
        "data_parallel_shard_degree",
        "tensor_parallel_degree",
        "pipeline_parallel_degree",
        "expert_parallel_degree",
        "context_parallel_degree",
    ),
    "training": ("seq_len", "local_batch_size"),
}


def from_spec(asked: RecordOptions, note: Callable[[str], None]) -> RecordRequest:
    """--torchtitan MODULE:CONFIG, its overrides after `--`."""
    job = job_from_spec(str(asked.torchtitan), list(asked.args))
    return _request(
        job, asked, note, world_size=asked.world_size, ranks=pick(asked.ranks, default="all"), out=asked.out
    )


def from_toml(asked: RecordOptions, note: Callable[[str], None]) -> RecordRequest | None:
    """The request of CONFIG.toml when TorchTitan records it, else None (the built-in workload's)."""
    path = str(asked.config)
    raw = config_mod.read_toml(path)
    if not isinstance(raw.get("job"), dict) or "torchtitan" not in raw["job"]:
        job = _other_model(path, raw, note)
        if job is None:
            return None  # the built-in workload's model
        raw = {"tracer": raw.get("tracer", {})}
    else:
        job = None
    section = raw.get("tracer", {})
    if not isinstance(section, dict) or set(section) - TRACER_KEYS:
        raise TorchTitanError(f"{path}: [tracer] takes only {', '.join(sorted(TRACER_KEYS))} with [job] torchtitan")
    try:
        job = job or job_from_toml(raw)
    except TorchTitanError as e:
        raise TorchTitanError(f"{path}: {e}") from None
    job.overrides += asked.args
    r = section.get("ranks", "all")
    return _request(
        job,
        asked,
        note,
        world_size=pick(asked.world_size, default=section.get("world_size")),
        ranks=pick(asked.ranks, default=r if isinstance(r, str) else ",".join(map(str, r))),
        out=pick(asked.out, section.get("output"), default=os.path.splitext(os.path.basename(path))[0] + ".trace"),
        compute=section.get("compute"),
        numerics=section.get("numerics"),
        twin_of_dp=section.get("twin_of_dp", 0),
    )


def _request(
    job: TorchTitanJob,
    asked: RecordOptions,
    note: Callable[[str], None],
    *,
    world_size: int | None,
    ranks: str,
    out: str | None,
    compute: str | None = None,
    numerics: bool | None = None,
    twin_of_dp: int = 0,
) -> RecordRequest:
    """`compute`, `numerics`: the TOML's (the command line's wins); `twin_of_dp`: [tracer]'s (a
    numerics twin of that many dp ranks, one rank: docs/numerics.md)."""
    if asked.mode is not None and asked.mode not in ALIASES:
        raise ValueError(f"--mode must be fake or local (or fake_backend / local_tensor), got {asked.mode!r}")
    if not isinstance(twin_of_dp, int) or isinstance(twin_of_dp, bool) or twin_of_dp < 0:
        raise TorchTitanError(f"[tracer] twin_of_dp must be an integer, at least 0 (0: not a twin), got {twin_of_dp!r}")
    p = plan(job, world_size=world_size, mode=ALIASES[asked.mode] if asked.mode else None, twin_of_dp=twin_of_dp)
    assert world_size is not None  # plan refuses a missing world size
    if twin_of_dp and world_size != 1:
        raise TorchTitanError(f"[tracer] twin_of_dp: a numerics twin runs on one rank, got world size {world_size}")
    rank_list = parse_ranks(ranks, world_size)
    for line in p.notes:
        note(line)
    used, why = resolve_compute(pick(asked.compute, compute, default="auto"), p.mode)
    return RecordRequest(
        program=p.program,
        world_size=world_size,
        out=pick(out, default=f"{job.config}.trace"),
        mode=p.mode,
        ranks=rank_list,
        config=p.config,
        compute=used,
        compute_why=why,
        timeout=asked.timeout,
        jobs=asked.jobs,
        executor=asked.executor,
        ray_address=asked.ray_address,
        numerics=bool(pick(asked.numerics, numerics, default=False)),
    )


def _other_model(path: str, raw: dict, note: Callable[[str], None]) -> TorchTitanJob | None:
    """A TorchTitan train config of a model the built-in workload is not (deepseek_v3, qwen3, ...):
    TorchTitan's config `<name>_<flavor>` with the file's degrees and batch, recorded by the
    installed TorchTitan; None for the built-in llama3; one line (TorchTitanError) without TorchTitan."""
    model = raw.get("model", {})
    name = model.get("name", "llama3") if isinstance(model, dict) else "llama3"
    if not isinstance(name, str) or name in FLAVORS:
        return None
    if version.installed() is None:
        raise TorchTitanError(
            f"{path}: model.name {name!r}: the built-in workload is llama3; other TorchTitan models record "
            f"through TorchTitan itself: pip install 'commtrace[torchtitan]'"
        )
    sections = {
        sec: {k: v for k, v in raw.get(sec, {}).items() if k in keys}
        for sec, keys in PASSED_ON.items()
        if isinstance(raw.get(sec), dict)
    }
    tracer = raw.get("tracer", {}) if isinstance(raw.get("tracer"), dict) else {}
    steps = tracer.get("steps") or min(raw.get("training", {}).get("steps", DRY_RUN_STEPS), DRY_RUN_STEPS)
    sections.setdefault("training", {})["steps"] = steps
    config = _config_for(name, str(model.get("flavor", "debugmodel")), os.path.splitext(os.path.basename(path))[0])
    if config is None:
        raise TorchTitanError(
            f"{path}: model.name {name!r}: TorchTitan {version.installed()} has no such model "
            f"(torchtitan.models.{name}); record it with a TorchTitan release that ships it"
        )
    note(f"model {name!r} records through the installed TorchTitan ({name}:{config}), {steps} steps")
    return TorchTitanJob(module=name, config=config, overrides=toml_overrides(sections))


def _config_for(name: str, flavor: str, stem: str) -> str | None:
    """TorchTitan 0.3's config of model `name` for a v0.2 `flavor`: `<name>_<flavor>` when it is
    registered, else a registered config whose model_spec is built for that flavor (0.3 named
    some configs after v0.2's TOML files: qwen3's debugmodel_moe is `qwen3_moe_debug`), the one
    named like the TOML first, then the shortest name. `<name>_<flavor>` when none is found:
    TorchTitan's own parser then says what exists, in one line. None when this TorchTitan has
    no such model (0.3.0 ships no llama4)."""
    import contextlib
    import importlib
    import importlib.util
    import inspect
    import io

    default = f"{name}_{flavor}"
    if not name.isidentifier() or importlib.util.find_spec(f"torchtitan.models.{name}") is None:
        return None
    try:
        from tracer.adapters.torchtitan import runtime

        runtime.prepare()
        registry = importlib.import_module(f"torchtitan.models.{name}.config_registry")
    except Exception:  # its parser's error says why, in one line
        return default
    if hasattr(registry, default):
        return default
    found = []
    for fn_name, fn in vars(registry).items():
        if fn_name.startswith("_") or not inspect.isfunction(fn) or fn.__module__ != registry.__name__:
            continue
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                spec = getattr(fn(), "model_spec", None)  # configs log notes while being built
        except Exception:  # a config that cannot be built here is not the one
            continue
        if getattr(spec, "flavor", None) == flavor:
            found.append(fn_name)
    return min(found, key=lambda n: (n != stem, len(n), n)) if found else default
