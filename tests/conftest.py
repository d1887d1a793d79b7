"""Shared fixtures: record the small test programs once per session, decode streams."""

from __future__ import annotations

import os
import subprocess
import sys

import polars as pl
import pytest
from hypothesis import HealthCheck, settings

# Hypothesis in CI is derandomized: the same examples on every run, so a failure found on CI
# replays anywhere (and CI cannot fail at random). HYPOTHESIS_PROFILE=explore searches afresh;
# pin what it finds with @example. The campaign at scale is bench/fuzz.py.
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
settings.register_profile(
    "explore",
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

TEST_LIMIT_S = float(os.environ.get("COMMTRACE_TEST_LIMIT_S", "900"))
"""No test runs longer than this: past it, every thread's stack goes to stderr and the session
exits (a test that hangs, e.g. on ranks waiting for a peer that never runs, would otherwise hold
CI until its own limit, with nothing said about where)."""


@pytest.fixture(autouse=True)
def _hang_guard():
    import faulthandler

    faulthandler.dump_traceback_later(TEST_LIMIT_S, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "programs")
REPO = os.path.dirname(HERE)
BIN = os.path.dirname(sys.executable)


def program(name: str) -> str:
    return os.path.join(PROGRAMS, name + ".py")


# The fast tier (`make test-fast`, `pytest -m "not records"`): tests that neither record a program
# nor run one on gloo. These folders record by nature; elsewhere a test that asks for a recording
# fixture is marked here, and one that records by itself carries @pytest.mark.records.
RECORDING_FOLDERS = {"record", "torchtitan", "end_to_end", "frameworks"}
RECORDING_FIXTURES = {"recorded", "workload"}


def pytest_collection_modifyitems(items):
    for item in items:
        folder = os.path.relpath(str(item.path), HERE).split(os.sep)[0]
        if folder in RECORDING_FOLDERS or RECORDING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.records)


@pytest.fixture(scope="session")
def recorded(tmp_path_factory):
    """recorded(name, world_size, mode="fake", args=()) -> path of the merged trace (cached)."""
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    cache: dict = {}
    root = tmp_path_factory.mktemp("traces")

    def get(name: str, world_size: int = 4, mode: str = "fake", args: tuple = (), ranks=None):
        key = (name, world_size, mode, tuple(args), tuple(ranks or ()))
        if key not in cache:
            out = str(root / f"{name}-{world_size}-{mode}-{abs(hash(key))}.trace")
            res = record(
                RecordRequest(
                    program=Program(script=program(name), args=list(args)),
                    world_size=world_size,
                    out=out,
                    mode=mode,
                    ranks=ranks,
                    progress=False,
                )
            )
            cache[key] = (out, res)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def workload(tmp_path_factory):
    """workload(name, mode="fake") -> (loaded trace, RecordResult) of examples/<name>.toml (cached)."""
    from analyzer.loader import load
    from tracer import config
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    cache: dict = {}
    root = tmp_path_factory.mktemp("workload")

    def get(name: str, mode: str = "fake"):
        if (name, mode) not in cache:
            cfg = config.load(os.path.join(REPO, "examples", name + ".toml"))
            out = str(root / f"{name}-{mode}.trace")
            res = record(
                RecordRequest(
                    program=config.program(cfg),
                    world_size=cfg.world_size,
                    out=out,
                    mode=mode,
                    config=cfg.to_dict(),
                    progress=False,
                )
            )
            assert res.errors == {}, res.errors
            cache[name, mode] = (load(out), res)
        return cache[name, mode]

    return get


def stream(trace, rank: int, ops=None) -> list[dict]:
    """Rank's events in program order with atoms decoded and group as (label, ranks)."""
    ev = (
        trace.events.filter(pl.col("rank") == rank)
        .sort("idx")
        .join(trace.groups.select("gid", "label", "ranks"), left_on="group", right_on="gid", how="left")
        .sort("idx")
    )
    out = []
    for r in ev.iter_rows(named=True):
        if ops is not None and r["op"] not in ops:
            continue
        d = dict(r)
        for name in ("in_shapes", "out_shapes", "splits", "info"):
            d[name] = trace.atom(r[name])
        d["group"] = (r["label"], tuple(r["ranks"])) if r["label"] is not None else None
        out.append(d)
    return out


def sig(e: dict) -> tuple:
    """The facts a comm pattern test pins: op, group, seq, peer, dtype, shapes, reduce op, async."""
    return (
        e["op"],
        e["group"][0] if e["group"] else None,
        e["seq"],
        e["peer"],
        e["dtype"],
        e["in_shapes"],
        e["out_shapes"],
        e["reduce_op"],
        e["async_op"],
    )


# helpers shared by test files in several folders (a test module never imports another)
TT = os.path.join(HERE, "torchtitan", "torchtitan_v0.2.2")
"""TorchTitan v0.2.2's shipped train configs, copied unchanged."""


def run_tracer(*args, cwd=None, timeout=300):
    return subprocess.run(
        [os.path.join(BIN, args[0]), *args[1:]], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )


def one_line_error(proc) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert lines, proc.stderr
    assert "Traceback" not in proc.stderr
    return lines[0]


def record_one_block(tmp_path, toml_name: str, flavor: str):
    """Record a shipped preset unchanged but for one block (n_layers next to its flavor), at
    -n 16 (dp 2 x tp 8), rank 0 only; returns (the finished process, the trace's path)."""
    text = open(os.path.join(TT, toml_name)).read()
    assert f'flavor = "{flavor}"\n' in text
    toml = tmp_path / toml_name.replace(".toml", "_1block.toml")
    toml.write_text(text.replace(f'flavor = "{flavor}"\n', f'flavor = "{flavor}"\nn_layers = 1\n'))
    out = tmp_path / toml_name.replace(".toml", ".trace")
    p = run_tracer("tracer", "record", str(toml), "-n", "16", "--ranks", "0", "-o", str(out))
    assert p.returncode == 0, p.stderr
    return p, out
