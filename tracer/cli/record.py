"""`tracer record`: parse the command line into RecordOptions, build the one RecordRequest
(tracer/record/build.py), record it, report. Bad input: one line, exit 2."""

from __future__ import annotations

import typer

from tracer.cli.common import analyzer, fail, note
from tracer.cli.common import record as record_and_report

CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}
"""Arguments after `--` are the program's (or TorchTitan's overrides)."""


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
        None,
        "--mode",
        help="fake: a process per rank (fake backend); local: one process, LocalTensorMode (SPMD only); "
        "real: a process per rank on real gloo (real values, any CPU program; all ranks at once).",
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
    numerics: bool = typer.Option(
        False,
        "--numerics",
        help="Record numerics per step (loss, gradient norm, digests of module outputs, input gradients and "
        "parameters; local or real mode): `analyzer numerics` compares them.",
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
    reference: int = typer.Option(
        None,
        "--reference",
        metavar="N",
        help="Also record the program at N ranks (1: the single-process run) to OUT.ref.trace, with --numerics, "
        "and compare: analyzer numerics OUT --ref OUT.ref.trace (its exit code: 0 equal, 1 divergence).",
    ),
) -> None:
    """Record a job config or a program; arguments after `--` go to the program."""
    from tracer.record.build import build
    from tracer.record.options import RecordOptions

    args = list(ctx.args)
    if config is not None and (script or entrypoint or torchtitan) is not None and not config.endswith(".toml"):
        args.insert(0, config)  # `--script x.py -- ARGS`: click hands the first ARG to CONFIG
        config = None  # type: ignore[assignment]
    asked = RecordOptions(
        config=config,
        script=script,
        entrypoint=entrypoint,
        torchtitan=torchtitan,
        args=args,
        world_size=world_size,
        steps=steps,
        mode=mode,
        ranks=ranks,
        share=not all_ranks,
        out=out,
        timeout=timeout,
        jobs=jobs,
        compute=compute,
        numerics=numerics or None,
        executor=executor,
        ray_address=ray_address,
    )
    if reference is not None:
        asked.numerics = True  # a reference is compared by its numerics
    try:
        request = build(asked, note)
        if reference is not None:
            from tracer.record.reference import reference_options

            twin = build(reference_options(asked, request.out, reference), note)
    except ValueError as e:
        fail(str(e))
    record_and_report(request)
    if reference is not None:
        record_and_report(twin)
        raise typer.Exit(analyzer("numerics", request.out, "--ref", twin.out))
