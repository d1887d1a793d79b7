"""Messages say what is known: a truncated file or an interrupted parts folder is "stream ends
early (truncated file)", never a guess that a process died; a collective that one stopped stream
never reached names only that rank; a mesh dim has one name in check, summary and diff; a Flight
Recorder dump's header leaves out what the dump does not say (no `?`)."""

import io
import os
import pickle
import sys

import numpy as np
import pytest
from conftest import REPO
from rich.console import Console

from analyzer.checks import run_checks
from analyzer.compare.normalize import group_keys
from analyzer.compare.summary import summarize
from analyzer.loader import load
from analyzer.render import console as render
from traceformat import format as fmt
from traceformat.ops import COLLECTIVE_OPS
from traceformat.reader import read_trace
from traceformat.writer import TraceWriter

GUESSES = ("died", "its log", "stopped before finishing", "its consequence")


def _truncated_golden(tmp_path) -> str:
    """A golden cut where some ranks' streams are in the file and others are not."""
    data = open(os.path.join(REPO, "traces", "fsdp.trace"), "rb").read()
    for frac in range(50, 95, 5):
        path = tmp_path / f"cut{frac}.trace"
        path.write_bytes(data[: len(data) * frac // 100])
        try:
            t = load(path)
        except Exception:
            continue
        if t.ranks and t.missing_ranks:
            return str(path)
    raise AssertionError("no cut of fsdp.trace keeps some streams and loses others")


def test_truncated_file_says_the_stream_ends_early(tmp_path):
    t = load(_truncated_golden(tmp_path))
    found = {f.kind.name: f for f in run_checks(t).findings}
    assert set(found) == {"failed_rank", "missing_rank"}
    missing, failed = found["missing_rank"], found["failed_rank"]
    assert missing.culprit_ranks == t.missing_ranks and failed.culprit_ranks == t.ranks
    assert "the trace ends early (truncated file)" in missing.message
    assert "ends early (truncated file;" in failed.message or "end early (truncated file;" in failed.message
    for f in (missing, failed):
        assert not any(g in f.message for g in GUESSES), f.message


def _hashable(v):
    return tuple(_hashable(x) for x in v) if isinstance(v, list) else v


def interrupted_parts(trace_path: str, folder, keep: dict[int, int]) -> None:
    """A parts folder as an interrupted recording leaves it: per rank the first `keep[rank]`
    events of the trace as rows, and no end record or footer."""
    data = read_trace(trace_path)
    os.makedirs(folder, exist_ok=True)
    for rank, n in keep.items():
        cols = {name: np.asarray(data.columns[rank][name])[:n] for name in fmt.COLUMN_NAMES}
        w = TraceWriter(os.path.join(folder, f"rank_{rank:05d}.part"), dict(data.header, ranks=[rank], part=True))
        try:
            for g in data.groups.values():
                w.group(g["gid"], g["name"], g["ranks"], g["desc"])
            for i in range(n):
                row = []
                for name in fmt.COLUMN_NAMES:
                    v = cols[name][i].item()
                    row.append(w.atom(_hashable(data.atoms[v])) if name in fmt.ATOM_COLUMNS and v >= 0 else v)
                w.row(rank, row)
        finally:
            w.close()  # as a killed recorder leaves it: no end record, no footer


@pytest.fixture(scope="module")
def tp2(recorded):
    """tests/programs/tp.py on 2 ranks: a 1-D `tp` mesh that reuses the default group."""
    return recorded("tp", 2)[0]


@pytest.mark.parametrize("short", [0, 1])
def test_interrupted_parts_name_only_the_stream_that_stops_first(tp2, tmp_path, short):
    ops = [read_trace(tp2).atoms[o] for o in np.asarray(read_trace(tp2).columns[0]["op"])]
    at = [i for i, op in enumerate(ops) if op in COLLECTIVE_OPS][3]  # the 4th collective
    cut = at + 2  # the longer stream has it and its wait; the shorter one stops just before it
    interrupted_parts(tp2, tmp_path / "parts", {short: at, 1 - short: cut})
    t = load(tmp_path / "parts")
    found = run_checks(t).findings
    kinds = sorted(f.kind.name for f in found)
    assert kinds == ["failed_rank", "missing_collective"], [f.message for f in found]
    skip = next(f for f in found if f.kind.name == "missing_collective")
    assert skip.culprit_ranks == [short], skip.message  # not both members
    assert skip.message.startswith(f"rank {short}'s stream ends before {ops[at]} #3 on tp (ranks 0-1)")
    assert "truncated file" in skip.message and "never issued" not in skip.message
    failed = next(f for f in found if f.kind.name == "failed_rank")
    assert failed.culprit_ranks == [0, 1] and "streams end early (truncated file;" in failed.message
    for f in found:
        assert not any(g in f.message for g in GUESSES), f.message


def test_a_1d_mesh_has_one_name_in_check_summary_and_diff(tp2):
    t = load(tp2)
    keys = group_keys(t)
    labels = dict(zip(t.groups["gid"].to_list(), t.groups["label"].to_list()))
    dims = dict(zip(keys["gid"].to_list(), keys["dim"].to_list()))
    assert labels == dims and set(labels.values()) == {"tp"}
    assert set(summarize(t).table["group"].to_list()) == {"tp"}
    assert set(keys["gkey"].to_list()) == {"tp/2"}


def test_flight_recorder_header_shows_what_the_dump_knows(tmp_path):
    sys.path.insert(0, os.path.join(REPO, "bench"))
    from fr_synth import dump, groups

    config, mine = groups(8)
    for r in range(8):
        (tmp_path / f"rank_{r}").write_bytes(dump(r, 8, 8, config, mine[r]))
    t = load(tmp_path)
    c = Console(width=200, file=io.StringIO(), color_system=None, force_terminal=False)
    render.trace_header(c, t)
    header = c.file.getvalue().splitlines()[0]
    assert header == "world size 8 · mode flight_recorder · FR version 2.10 · 8 rank streams · 64 events"
    d = pickle.loads(dump(0, 8, 8, config, mine[0]))
    del d["version"]  # an older dump: no version either
    (tmp_path / "rank_0").write_bytes(pickle.dumps(d))
    c = Console(width=200, file=io.StringIO(), color_system=None, force_terminal=False)
    render.trace_header(c, load(tmp_path))
    assert "?" not in c.file.getvalue().splitlines()[0]
