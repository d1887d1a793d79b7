"""The torch communication corpus: programs rebuilt from PyTorch's own communication-count tests
(tests/programs/torch_comm/), recorded in fake and in local mode. Per window (the `step` column:
each script steps an empty optimizer around what the peer test runs under CommDebugMode), the
collectives per op and per module are exactly the numbers the peer test asserts; every recorded
collective matches torch's own CommDebugMode on torch's fake process group
(bench/torch_comm_truth.py), op, direction, module and order; and `analyzer check` is clean.

Peer tests: pytorch/pytorch test/distributed/..., read at the commits named in TESTS (the
versions nearest torch 2.13; every assertion cited was checked against the installed torch by
the ground truth). docs/torch-comm-corpus.md has the table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import pytest
from conftest import REPO, program, run_tracer, stream
from torch_comm_windows import OPT, WINDOWS, B, F, Window

from analyzer.loader import load
from traceformat.ops import COLLECTIVE_OPS

MODES = ["fake", "local"]
SCRIPTS = {  # corpus script -> world size (the peer test's, or 4)
    "redistribute": 4,
    "comm_mode": 2,
    "comm_mode_rooted": 2,
    "comm_mode_features": 4,
    "tp_style": 4,
    "tp_examples": 4,
    "math_ops": 4,
    "fsdp_comm": 4,
}
TESTS = {  # corpus script -> the peer test file @ the commit read
    "redistribute": "test/distributed/tensor/test_redistribute.py @0133e92",
    "comm_mode": "test/distributed/tensor/debug/test_comm_mode.py @02dd4ff",
    "comm_mode_rooted": "test/distributed/tensor/debug/test_comm_mode.py @02dd4ff",
    "comm_mode_features": "test/distributed/tensor/debug/test_comm_mode_features.py @01f9ef3",
    "tp_style": "test/distributed/tensor/parallel/test_tp_style.py @02dd4ff",
    "tp_examples": "test/distributed/tensor/parallel/test_tp_examples.py @02dd4ff",
    "math_ops": "test/distributed/tensor/test_math_ops.py @0088381",
    "fsdp_comm": "test/distributed/_composable/fsdp/test_fully_shard_comm.py @01d5c2c",
}
# Windows where torch itself takes another path under LocalTensorMode: DTensor's shard_dim_alltoall
# gathers and chunks on a CPU mesh (the peer test's CPU branch, and torch's fake process group),
# but runs its all-to-all under LocalTensorMode (the peer's accelerator branch)
LOCAL_PATH = {("redistribute", 11), ("redistribute", 13), ("redistribute", 15), ("redistribute", 17)}
# Programs that branch on their rank (torch wants gather's / scatter's list on the root only):
# local mode runs rank 0's Python for every rank and refuses them in one line (test_local_refuses)
FAKE_ONLY = {"comm_mode_rooted"}
# FSDP: commtrace files an FSDP collective under its FSDP unit (the param group it moves);
# CommDebugMode under whichever module ran last (in backward, a leaf inside the unit): modules
# are compared with the ground truth everywhere else
UNIT_ATTRIBUTION = {"fsdp_comm"}


def direction(phase: str) -> str:
    return phase if phase in (B, OPT) else F


def window_events(t, rank: int, step: int) -> list[dict]:
    return [e for e in stream(t, rank) if e["step"] == step and e["op"] in COLLECTIVE_OPS]


def counts_of(events) -> dict[str, dict[str, int]]:
    out: dict[str, Counter] = {}
    for e in events:
        out.setdefault(direction(e["phase"]), Counter())[e["op"]] += 1
    return {d: dict(c) for d, c in out.items()}


def module_counts(events, root: str) -> dict[str, dict[str, Counter]]:
    """CommDebugMode's comm_module_counts from commtrace's module column: "Global" counts every
    collective, a module its own and its descendants' (optimizer steps count as forward)."""
    out: dict[str, dict[str, Counter]] = {}
    for e in events:
        names = ["Global"]
        module = e["module"]
        if module:
            names.append(root)
            if module != root:
                parts = module.split(".")
                names += [".".join([root, *parts[: i + 1]]) for i in range(len(parts))]
        way = B if e["phase"] == B else F
        for name in names:
            out.setdefault(name, {}).setdefault(way, Counter())[e["op"]] += 1
    return out


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """(script, mode) -> (path, loaded trace, RecordResult): one recording per script and mode."""
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    cache: dict = {}
    root = tmp_path_factory.mktemp("corpus")

    def get(script: str, mode: str):
        if (script, mode) not in cache:
            path = str(root / f"{script}-{mode}.trace")
            request = RecordRequest(
                program=Program(script=program("torch_comm/" + script), args=[]),
                world_size=SCRIPTS[script],
                out=path,
                mode=mode,
                progress=False,
            )
            res = record(request)
            cache[script, mode] = (path, load(path) if os.path.exists(path) else None, res)
        return cache[script, mode]

    return get


@pytest.fixture(scope="module")
def truth(tmp_path_factory):
    """(script, rank) -> the collectives torch's CommDebugMode counts (bench/torch_comm_truth.py)."""
    cache: dict = {}
    root = tmp_path_factory.mktemp("truth")

    def get(script: str, rank: int) -> list[dict]:
        if (script, rank) not in cache:
            out = root / f"{script}-{rank}.json"
            env = dict(os.environ, PYTHONPATH=REPO)
            cmd = [sys.executable, os.path.join(REPO, "bench", "torch_comm_truth.py"), program("torch_comm/" + script)]
            p = subprocess.run(
                [*cmd, "--rank", str(rank), "-n", str(SCRIPTS[script]), "-o", str(out)],
                capture_output=True,
                text=True,
                env=env,
                timeout=300,
            )
            assert p.returncode == 0, p.stderr[-3000:]
            cache[script, rank] = json.loads(out.read_text())
        return cache[script, rank]

    return get


def modes_of(script: str) -> list[str]:
    return ["fake"] if script in FAKE_ONLY else MODES


@pytest.mark.parametrize(
    "w,mode", [pytest.param(w, m, id=f"{w.script}-{w.step}-{m}") for w in WINDOWS for m in modes_of(w.script)]
)
def test_peer_counts(corpus, w: Window, mode):
    # every rank of the window holds exactly the peer test's collectives per op and direction
    _, t, res = corpus(w.script, mode)
    assert res.errors == {}, res.errors
    expected = w.local_counts if mode == "local" and w.local_counts is not None else w.counts
    for rank in t.ranks:
        events = window_events(t, rank, w.step)
        assert counts_of(events) == {d: c for d, c in expected.items() if c}, (rank, w.peer)
        got = module_counts(events, w.root)
        for name, ways in w.modules.items():
            for way, ops in ways.items():
                for op, n in ops.items():
                    assert got.get(name, {}).get(way, Counter())[op] == n, (rank, name, way, op, w.peer)
        units: dict[str, dict[str, Counter]] = {}
        for e in events:
            units.setdefault(e["module"], {}).setdefault(direction(e["phase"]), Counter())[e["op"]] += 1
        for unit, ways in w.units.items():
            assert {d: dict(c) for d, c in units.get(unit, {}).items()} == ways, (rank, unit, w.peer)


@pytest.mark.parametrize("script,mode", [(s, m) for s in SCRIPTS for m in modes_of(s)])
def test_matches_comm_debug_mode(corpus, truth, script, mode):
    # every collective CommDebugMode counts, in program order: step, direction, module, op
    _, t, res = corpus(script, mode)
    assert res.errors == {}, res.errors
    counted = COLLECTIVE_OPS - {"barrier"}  # what CommDebugMode counts
    for rank in (0, 1):
        want = truth(script, rank)
        got = [e for e in stream(t, rank) if e["op"] in counted]
        if mode == "local":  # torch's own other path (LOCAL_PATH): asserted by test_peer_counts
            want = [e for e in want if (script, e["step"]) not in LOCAL_PATH]
            got = [e for e in got if (script, e["step"]) not in LOCAL_PATH]
        key = (
            (lambda e: (e["step"], direction(e["phase"]) if e["phase"] != OPT else F, e["op"]))
            if (script in UNIT_ATTRIBUTION)
            else (lambda e: (e["step"], direction(e["phase"]) if e["phase"] != OPT else F, e["module"], e["op"]))
        )
        assert [key(e) for e in got] == [key(e) for e in want], (script, rank)


@pytest.mark.parametrize("script,mode", [(s, m) for s in SCRIPTS for m in modes_of(s)])
def test_check_is_clean(corpus, script, mode):
    path, _, res = corpus(script, mode)
    assert res.errors == {}, res.errors
    p = run_tracer("analyzer", "check", path)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("script", sorted(FAKE_ONLY))
def test_local_refuses(corpus, script):
    # a fake-only program: local mode says why in one line on every rank, and records no collective
    _, _, res = corpus(script, "local")
    assert res.errors.keys() == set(range(SCRIPTS[script]))
    assert all("RankDependent: the program's behaviour depends on its rank" in e for e in res.errors.values())
