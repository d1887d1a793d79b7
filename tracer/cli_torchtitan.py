"""`tracer record --torchtitan MODULE:CONFIG` and TOMLs with `[job] torchtitan`: parse, plan
(tracer/adapters/torchtitan), record, report; bad input is one line and exit 2."""

from __future__ import annotations

import os


def record_spec(spec, overrides, world_size, mode, ranks, out, compute, run) -> None:
    from tracer.adapters.torchtitan.job import TorchTitanError, from_spec
    from tracer.cli import _fail

    try:
        job = from_spec(spec, overrides)
    except TorchTitanError as e:
        _fail(str(e))
    _record(job, world_size, mode, ranks, out, compute, run)


def record_toml(path, world_size, mode, ranks, out, compute, run, extra) -> bool:
    """Record `path` when it has `[job] torchtitan` (True), else leave it to the built-in
    workload (False). The [tracer] section gives what the command line does not; arguments
    after `--` are more TorchTitan overrides."""
    from tracer import config as config_mod
    from tracer.adapters.torchtitan.job import TorchTitanError, from_toml
    from tracer.cli import _fail

    try:
        raw = config_mod.read_toml(path)
    except ValueError as e:
        _fail(str(e))
    if not isinstance(raw.get("job"), dict) or "torchtitan" not in raw["job"]:
        job = _other_model(path, raw)
        if job is None:
            return False  # the built-in workload's model
        raw = {"tracer": raw.get("tracer", {})}
    else:
        job = None
    section = raw.get("tracer", {})
    known = {"world_size", "ranks", "output", "compute", "steps"}
    if not isinstance(section, dict) or set(section) - known:
        _fail(f"{path}: [tracer] takes only {', '.join(sorted(known))} with [job] torchtitan")
    try:
        job = job or from_toml(raw)
    except TorchTitanError as e:
        _fail(f"{path}: {e}")
    job.overrides += extra
    r = section.get("ranks", "all")
    _record(
        job,
        world_size if world_size is not None else section.get("world_size"),
        mode,
        ranks if ranks is not None else (r if isinstance(r, str) else ",".join(map(str, r))),
        out or section.get("output") or os.path.splitext(os.path.basename(path))[0] + ".trace",
        compute or section.get("compute"),
        run,
    )
    return True


def _record(job, world_size, mode, ranks, out, compute, run) -> None:
    from traceformat.ranks import parse_ranks
    from tracer.adapters.torchtitan.job import TorchTitanError
    from tracer.adapters.torchtitan.plan import plan
    from tracer.cli import _fail, _run
    from tracer.compute import resolve as resolve_compute
    from tracer.modes import ALIASES
    from tracer.record import record as run_record

    if mode is not None and mode not in ALIASES:
        _fail(f"--mode must be fake or local (or fake_backend / local_tensor), got {mode!r}")
    try:
        p = plan(job, world_size=world_size, mode=ALIASES[mode] if mode else None)
        rank_list = parse_ranks(ranks, world_size)
        used, why = resolve_compute(compute or "auto", p.mode)
    except (TorchTitanError, ValueError) as e:
        _fail(str(e))
    _run(
        run_record,
        p.program,
        world_size=world_size,
        out=out or f"{job.config}.trace",
        mode=p.mode,
        ranks=rank_list,
        config=p.config,
        compute=used,
        compute_why=why,
        **run,
    )


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


def _other_model(path: str, raw: dict):
    """A TorchTitan train config of a model the built-in workload is not (deepseek_v3, qwen3, ...):
    TorchTitan's config `<name>_<flavor>` with the file's degrees and batch, recorded by the
    installed TorchTitan; None for the built-in llama3; one line and exit 2 without TorchTitan."""
    from tracer.adapters.torchtitan.job import TorchTitanJob, toml_overrides
    from tracer.adapters.torchtitan.version import installed
    from tracer.cli import _fail
    from tracer.config_keys import DRY_RUN_STEPS
    from tracer.flavors import FLAVORS

    model = raw.get("model", {})
    name = model.get("name", "llama3") if isinstance(model, dict) else "llama3"
    if not isinstance(name, str) or name in FLAVORS:
        return None
    if installed() is None:
        _fail(
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
    import typer

    config = _config_for(name, str(model.get("flavor", "debugmodel")), os.path.splitext(os.path.basename(path))[0])
    if config is None:
        _fail(
            f"{path}: model.name {name!r}: TorchTitan {installed()} has no such model "
            f"(torchtitan.models.{name}); record it with a TorchTitan release that ships it"
        )
    typer.echo(
        f"note: model {name!r} records through the installed TorchTitan ({name}:{config}), {steps} steps", err=True
    )
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
