"""`tracer`: record a program's comm pattern per simulated rank. Parse, call the library, report.

Exit codes: 0 recorded, 2 bad input or a program that failed on some rank (the ranks that did
record keep their events in the trace).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

import typer

from tracer.cli_golden import golden_app
from tracer.cli_replay import replay

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Record every collective, DeviceMesh op and DTensor redistribution of a "
    "torch.distributed program, per simulated rank, without a cluster.",
)


app.add_typer(golden_app, name="golden")
app.command()(replay)


@app.callback()
def _root() -> None:
    """commtrace recorder."""


def _fail(msg: str) -> NoReturn:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(2)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def record(
    ctx: typer.Context,
    config: str = typer.Argument(
        None,
        metavar="[CONFIG.toml]",
        help="A TorchTitan-style job config: records the built-in Llama workload (or its [job] script / entrypoint).",
    ),
    script: str = typer.Option(None, "--script", help="Python file to run as `python FILE.py ARGS` on every rank."),
    entrypoint: str = typer.Option(None, "--entrypoint", help="Run `package.module:function` instead of a script."),
    torchtitan: str = typer.Option(
        None,
        "--torchtitan",
        metavar="MODULE:CONFIG",
        help="Run the installed TorchTitan trainer (e.g. llama3:llama3_debugmodel); arguments after `--` are "
        "its `--section.key value` overrides.",
    ),
    world_size: int = typer.Option(None, "--world-size", "-n", help="Number of simulated ranks."),
    steps: int = typer.Option(
        None,
        "--steps",
        help="Optimizer steps to record from a CONFIG.toml (default: 2, or training.steps if fewer; "
        "with --torchtitan: TorchTitan's --training.steps).",
    ),
    mode: str = typer.Option(
        None, "--mode", help="fake: a process per rank (fake backend); local: one process, LocalTensorMode (SPMD only)."
    ),
    ranks: str = typer.Option(None, "--ranks", help="Ranks to record: all, or e.g. 0,3,8-15."),
    all_ranks: bool = typer.Option(
        False,
        "--all-ranks",
        help="Record every asked-for rank itself: no sharing between ranks identical up to relabelling "
        "(a CONFIG.toml's built-in workload in fake compute shares by default: see README).",
    ),
    out: str = typer.Option(None, "--out", "-o", help="Output .trace (default: <script>.trace)."),
    timeout: float = typer.Option(
        None, "--timeout", help="Kill a rank after this many seconds (default: never); what it recorded is kept."
    ),
    jobs: int = typer.Option(
        None, "--jobs", "-j", help="Ranks recorded at once (default: one per core, or the Ray cluster's CPUs)."
    ),
    compute: str = typer.Option(
        None,
        "--compute",
        help="Tensor math: real, fake (FakeTensorMode: shapes only; "
        "ranks that read a tensor value are re-recorded for real) or auto (default).",
    ),
    executor: str = typer.Option(
        "local",
        "--executor",
        help="Where ranks run: local (process pool) or ray (tasks on a Ray cluster; parts go to a shared filesystem).",
    ),
    ray_address: str = typer.Option(
        None,
        "--ray-address",
        help="Ray cluster to use with --executor ray (default: $RAY_ADDRESS, else a local Ray cluster).",
    ),
) -> None:
    """Record a job config or a program; arguments after `--` go to the program."""
    from traceformat.ranks import parse_ranks
    from tracer.compute import resolve as resolve_compute
    from tracer.modes import ALIASES
    from tracer.program import Program
    from tracer.record import check_options
    from tracer.record import record as run_record

    try:  # the numbers first: nothing is read or started with a bad one
        check_options(world_size=world_size, timeout=timeout, jobs=jobs)
    except ValueError as e:
        _fail(str(e))
    if config is not None and (script or entrypoint or torchtitan) is not None and not config.endswith(".toml"):
        ctx.args.insert(0, config)  # `--script x.py -- ARGS`: click hands the first ARG to CONFIG
        config = None  # type: ignore[assignment]
    run = dict(timeout=timeout, jobs=jobs, executor=executor, ray_address=ray_address)
    share = not all_ranks
    if steps is not None and steps < 1:
        _fail(f"--steps must be at least 1, got {steps}")
    if steps is not None and config is None and torchtitan is None:
        _fail("--steps applies to a CONFIG.toml or --torchtitan (a script counts its own steps)")
    if steps is not None and (torchtitan is not None or (config is not None and _has_torchtitan(config))):
        ctx.args.extend(["--training.steps", str(steps)])  # TorchTitan's own knob
        steps = None  # type: ignore[assignment]
    if torchtitan is not None:
        if config is not None or script is not None or entrypoint is not None:
            _fail("give --torchtitan MODULE:CONFIG alone (not with a CONFIG.toml, --script or --entrypoint)")
        from tracer import cli_torchtitan

        cli_torchtitan.record_spec(torchtitan, list(ctx.args), world_size, mode, ranks or "all", out, compute, run)
        return
    if config is not None:
        _record_config(
            config, script, entrypoint, world_size, steps, mode, ranks, out, compute, run, list(ctx.args), share
        )
        return
    mode = mode or "fake"
    ranks = ranks or "all"
    if (script is None) == (entrypoint is None):
        _fail("give exactly one of --script FILE.py or --entrypoint pkg.mod:fn")
    if world_size is None:
        _fail("--world-size is required")
    if mode not in ALIASES:
        _fail(f"--mode must be fake or local (or fake_backend / local_tensor), got {mode!r}")
    program = Program(script=script, entrypoint=entrypoint, args=list(ctx.args))
    try:
        program.check()
        rank_list = parse_ranks(ranks, world_size)
        used, why = resolve_compute(compute or "auto", ALIASES[mode])
    except ValueError as e:
        _fail(str(e))
    out = out or (os.path.splitext(os.path.basename(script))[0] if script else entrypoint.split(":")[-1]) + ".trace"
    _run(
        run_record,
        program,
        world_size=world_size,
        out=out,
        mode=ALIASES[mode],
        ranks=rank_list,
        compute=used,
        compute_why=why,
        timeout=timeout,
        jobs=jobs,
        executor=executor,
        ray_address=ray_address,
    )


def _has_torchtitan(path: str) -> bool:
    """Whether a TOML has `[job] torchtitan` (bad TOML: False, its own error comes later)."""
    from tracer import config as config_mod

    try:
        job = config_mod.read_toml(path).get("job")
    except ValueError:
        return False
    return isinstance(job, dict) and "torchtitan" in job


def _record_config(
    path, script, entrypoint, world_size, steps, mode, ranks, out, compute, run, extra, share=True
) -> None:
    """`tracer record CONFIG.toml`: options given on the command line override the TOML."""
    from traceformat.ranks import parse_ranks
    from tracer import config as config_mod
    from tracer.compute import resolve as resolve_compute
    from tracer.modes import ALIASES
    from tracer.record import record as run_record

    if script is not None or entrypoint is not None:
        _fail("give a CONFIG.toml or --script / --entrypoint, not both (use [job] script in the TOML)")
    from tracer import cli_torchtitan

    if cli_torchtitan.record_toml(path, world_size, mode, ranks, out, compute, run, extra):
        return  # a TOML with [job] torchtitan: the installed TorchTitan trainer
    if extra:
        _fail(f"unexpected arguments after the config: {' '.join(extra)} (use [job] args in the TOML)")
    if mode is not None and mode not in ALIASES:
        _fail(f"--mode must be fake or local (or fake_backend / local_tensor), got {mode!r}")
    try:
        cfg = config_mod.load(path, world_size=world_size, steps=steps)
        program = config_mod.program(cfg)
        program.check()
        rank_list = parse_ranks(ranks if ranks is not None else config_mod.ranks_spec(cfg), cfg.world_size)
    except ValueError as e:
        _fail(f"{path}: {e}")
    mode = ALIASES[mode or cfg.comm.mode]
    try:
        config_mod.check_mode(cfg, mode)
        used, why = resolve_compute(compute or cfg.tracer.compute, mode, cfg)
    except ValueError as e:
        _fail(f"{path}: {e}")
    out = out or cfg.tracer.output or os.path.splitext(os.path.basename(path))[0] + ".trace"
    if cfg.builtin:
        typer.echo(f"note: {cfg.steps_why()}", err=True)
        from tracer.config_check import notes as config_notes

        for note in config_notes(cfg):
            typer.echo(f"note: {note}", err=True)
    plan = None
    if share:
        from tracer import rank_sharing

        plan, not_shared = rank_sharing.plan(cfg, mode=mode, compute=used, ranks=rank_list, cores=run["jobs"])
        if plan is None and not_shared.startswith(rank_sharing.UNEVEN):
            typer.echo(f"note: recording every rank: {not_shared}", err=True)
    snapshot = dict(cfg.to_dict(), config_file=path)
    _run(
        run_record,
        program,
        world_size=cfg.world_size,
        out=out,
        mode=mode,
        ranks=rank_list,
        config=snapshot,
        compute=used,
        compute_why=why,
        share=plan,
        **run,
    )


def _run(run_record, program, **kwargs) -> None:
    from tracer.record import Interrupted

    try:
        result = run_record(program, **kwargs)
    except ValueError as e:  # bad options, an output that is an input, no torch, no Ray cluster...
        _fail(str(e))
    except Interrupted as e:
        typer.echo(e.message, err=True)
        raise typer.Exit(128 + e.signum) from None
    _report(result)


def _report(result) -> None:
    for note in result.notes:
        typer.echo(f"note: {note}", err=True)
    n = sum(result.n_events.values())
    if not result.written:
        typer.echo(f"error: no rank recorded anything; {result.out} not written", err=True)
        for line in list(result.errors.values())[:1]:
            typer.echo(f"error: {line}", err=True)
        raise typer.Exit(2)
    typer.echo(f"recorded {n} events on {len(result.ranks)} ranks in {result.seconds:.1f} s -> {result.out}", err=True)
    if result.peak_rss:
        typer.echo(_peaks(result.peak_rss), err=True)
    if result.errors:
        for line in list(result.errors.values())[:1]:
            typer.echo(f"error: {line}", err=True)
        if len(result.errors) > 1:
            typer.echo(
                f"error: {len(result.errors) - 1} more ranks failed: "
                f"{', '.join(str(r) for r in list(result.errors)[1:9])}",
                err=True,
            )
        raise typer.Exit(2)


def _peaks(peaks: dict[int, int]) -> str:
    """'peak memory per recording process: max 0.41 GiB (rank 3), median 0.38 GiB over 64'."""
    import statistics

    top = max(peaks, key=peaks.__getitem__)
    gib = 1 << 30
    return (
        f"peak memory per recording process: max {peaks[top] / gib:.2f} GiB (rank {top}), "
        f"median {statistics.median(peaks.values()) / gib:.2f} GiB over {len(peaks)}"
    )


@app.command()
def merge(
    inputs: list[str] = typer.Argument(
        ...,
        metavar="PARTS...",
        help="Folders of rank_*.part files (OUT.trace.parts), .part files, or partial .trace files (shards).",
    ),
    out: str = typer.Option(..., "--out", "-o", help="Output .trace."),
) -> None:
    """Join per-rank parts and shards (of an interrupted or sharded recording) into one trace."""
    from traceformat import format as fmt
    from traceformat import parts as trace_parts
    from traceformat.output import refuse_inputs, writable
    from tracer.record import collect_parts

    try:
        refuse_inputs(out, inputs)
        writable(out)
        files = collect_parts(inputs)
        refuse_inputs(out, files)
        summary = trace_parts.merge(files, out)
    except (ValueError, fmt.TraceFormatError) as e:
        _fail(str(e))
    for note in summary.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"merged {len(files)} parts ({len(summary.header['ranks'])} ranks) -> {out}", err=True)


def _analyzer(*args: str) -> int:
    """Run the torch-free analyzer's CLI on what was recorded: a subprocess, so that the recorder
    imports nothing from the analyzer. Its output goes straight to ours; returns its exit code."""
    import subprocess

    sys.stdout.flush()
    return subprocess.run([sys.executable, "-m", "analyzer", *args]).returncode


def _terminated(signum, frame) -> None:
    from tracer.record import Interrupted

    raise Interrupted(signum)


def main() -> None:
    signal.signal(signal.SIGTERM, _terminated)  # unwind like Ctrl-C: the ranks are killed, the parts kept
    try:
        app()
    except KeyboardInterrupt as e:
        sys.exit(128 + getattr(e, "signum", signal.SIGINT))


if __name__ == "__main__":
    main()
