"""analyzer export: the Perfetto timeline is valid Chrome trace JSON (every event placed, flows
paired and bound to their send / recv, tracks ordered and non-overlapping, names present), and
the parquet / JSON frames round-trip."""

import json
import os
import subprocess
import sys
from collections import defaultdict

import polars as pl
import pytest
from conftest import BIN, REPO
from polars.testing import assert_frame_equal

from analyzer.loader import load
from analyzer.render.frames import events_frame, groups_path

sys.path.insert(0, os.path.join(REPO, "bench"))
from fr_synth import dump, groups  # noqa: E402

EPS = 1e-6


def analyzer(*args, cwd=None):
    return subprocess.run([os.path.join(BIN, "analyzer"), *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def export_perfetto(trace_path, out, *extra) -> dict:
    p = analyzer("export", str(trace_path), "--format", "perfetto", "-o", str(out), *extra)
    assert p.returncode == 0, p.stderr
    with open(out) as f:
        return json.load(f)


def validate_perfetto(doc: dict) -> dict:
    """Check the Chrome trace event format as Perfetto reads it; return the events by phase."""
    events = doc["traceEvents"]
    by_ph = defaultdict(list)
    for e in events:
        for key in ("ph", "ts", "pid", "tid"):
            assert key in e, (key, e)
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        assert isinstance(e["pid"], int) and e["pid"] >= 1, e  # pid 0 is the kernel's to Perfetto
        assert isinstance(e["tid"], int) and e["tid"] >= 1, e
        by_ph[e["ph"]].append(e)
    assert set(by_ph) <= {"X", "M", "s", "f"}, set(by_ph)
    slices = by_ph["X"]
    for e in slices:
        assert e["dur"] >= 0 and e["name"] and e["args"]["op"], e
    # per track: in program order, no two slices overlapping
    tracks = defaultdict(list)
    for e in slices:
        tracks[e["pid"], e["tid"]].append(e)
    for key, track in tracks.items():
        track.sort(key=lambda e: e["ts"])
        idx = [e["args"]["idx"] for e in track]
        assert idx == sorted(idx), key
        for a, b in zip(track, track[1:]):
            assert a["ts"] + a["dur"] <= b["ts"] + EPS, (a, b)
    # metadata: a process name per rank, a thread name per track
    procs = {e["pid"]: e["args"]["name"] for e in by_ph["M"] if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in by_ph["M"] if e["name"] == "thread_name"}
    assert {pid for pid, _ in tracks} <= set(procs)
    assert all(name == f"rank {pid - 1}" for pid, name in procs.items())
    assert set(tracks) <= set(threads) and all(threads.values())
    # flows: every start has exactly one finish with its id and the reverse, each inside its slice
    starts, finishes = defaultdict(list), defaultdict(list)
    for e in by_ph["s"]:
        starts[e["id"]].append(e)
    for e in by_ph["f"]:
        finishes[e["id"]].append(e)
        assert e["bp"] == "e", e
    assert set(starts) == set(finishes)
    assert all(len(v) == 1 for v in starts.values()) and all(len(v) == 1 for v in finishes.values())

    def enclosing(e):
        return [s for s in tracks[e["pid"], e["tid"]] if s["ts"] <= e["ts"] <= s["ts"] + s["dur"]]

    for fid in starts:
        (s,), (f,) = starts[fid], finishes[fid]
        (send,), (recv,) = enclosing(s), enclosing(f)
        assert send["args"]["op"] == "send" and recv["args"]["op"] == "recv"
        assert send["args"]["peer"] == f["pid"] - 1 and recv["args"]["peer"] == s["pid"] - 1
        assert send["args"]["seq"] == recv["args"]["seq"] and send["args"]["gid"] == recv["args"]["gid"]
    return by_ph


def test_p2p_ring_has_a_flow_per_send(recorded, tmp_path):
    path, _ = recorded("p2p", 4, "fake")
    t = load(path)
    doc = export_perfetto(path, tmp_path / "p2p.json")
    ev = validate_perfetto(doc)
    sends = t.events.filter(pl.col("op") == "send").height
    assert sends == 12  # blocking, isend and batched, per rank of the ring
    assert len(ev["s"]) == len(ev["f"]) == sends
    assert len(ev["X"]) == t.events.height
    send = next(e for e in ev["X"] if e["args"]["op"] == "send")
    for key in ("group", "seq", "peer", "dtype", "in_shapes", "in_bytes", "frame", "module", "phase", "step"):
        assert key in send["args"], key
    assert "p2p.py" in send["args"]["frame"] and send["name"].startswith("send → ")


def test_ranks_slice_keeps_their_events_and_the_flows_between_them(recorded, tmp_path):
    """--ranks 0-1 of the p2p ring: only those two processes, only sends 0->1 / 1->0 as flows."""
    path, _ = recorded("p2p", 4, "fake")
    t = load(path)
    ev = validate_perfetto(export_perfetto(path, tmp_path / "half.json", "--ranks", "0-1"))
    assert {e["pid"] for e in ev["X"]} == {1, 2}  # pid = rank + 1
    assert len(ev["X"]) == t.events.filter(pl.col("rank") <= 1).height
    within = t.events.filter((pl.col("op") == "send") & (pl.col("rank") <= 1) & (pl.col("peer") <= 1)).height
    assert 0 < len(ev["s"]) == len(ev["f"]) == within


def test_logical_time_is_program_order(tmp_path):
    golden = os.path.join(REPO, "traces", "fsdp_tp_pp_1f1b.trace")
    doc = export_perfetto(golden, tmp_path / "pp.json")
    ev = validate_perfetto(doc)
    assert "logical" in doc["otherData"]["time"]
    assert all(e["ts"] == e["args"]["idx"] for e in ev["X"])  # 1 us = one event
    assert len(ev["s"]) > 0  # pipeline stages send activations and gradients
    t = load(golden)
    # tracks are named by mesh dim and members; a wait sits on the track of what it waits for
    names = {e["args"]["name"] for e in ev["M"] if e["name"] == "thread_name"}
    assert "rank-local (mesh, redistribute)" in names and any(n.startswith("tp (ranks ") for n in names)
    waits = [e for e in ev["X"] if e["args"]["op"] == "wait"]
    assert waits and all(e["tid"] != 1 and e["name"].startswith("wait (") for e in waits)
    assert len(ev["X"]) == t.events.height


def test_hang_trace_exports(recorded, tmp_path):
    path, _ = recorded("deadlock_ab", 2, "fake")
    ev = validate_perfetto(export_perfetto(path, tmp_path / "d.json"))
    groups_used = {e["args"].get("group") for e in ev["X"] if e["args"]["op"] == "all_reduce"}
    assert groups_used == {"A", "B"}


def test_flight_recorder_dumps_use_real_time(tmp_path):
    config, mine = groups(16)
    folder = tmp_path / "dumps"
    folder.mkdir()
    for r in range(16):
        (folder / f"rank_{r}").write_bytes(dump(r, 16, 50, config, mine[r]))
    doc = export_perfetto(folder, tmp_path / "fr.json")
    ev = validate_perfetto(doc)
    assert doc["otherData"]["time"].startswith("real")
    starts = sorted({e["ts"] for e in ev["X"] if e["pid"] == 1})
    assert starts[:3] == pytest.approx([0.0, 1.0, 2.0])  # entries 1000 ns apart = 1 us
    forced = export_perfetto(folder, tmp_path / "fr_logical.json", "--time", "logical")
    assert "logical" in forced["otherData"]["time"]


def test_parquet_round_trip(recorded, tmp_path):
    path, _ = recorded("p2p", 4, "fake")
    out = tmp_path / "t.parquet"
    p = analyzer("export", path, "--format", "parquet", "-o", str(out))
    assert p.returncode == 0, p.stderr
    t = load(path)
    back, back_groups = pl.read_parquet(out), pl.read_parquet(groups_path(str(out)))
    assert_frame_equal(back, events_frame(t))
    assert_frame_equal(back_groups, t.groups)
    assert back.columns[: len(t.events.columns)] == t.events.columns
    # atoms come back as JSON text; ops as plain strings
    row = back.filter(pl.col("op") == "send").row(0, named=True)
    first = t.events.filter(pl.col("op") == "send").row(0, named=True)
    assert json.loads(row["in_shapes"]) == t.atom(first["in_shapes"]) and row["group_label"] == "world"


def test_json_export(recorded, tmp_path):
    path, _ = recorded("p2p", 4, "fake")
    out = tmp_path / "t.json"
    assert analyzer("export", path, "--format", "json", "-o", str(out)).returncode == 0
    doc = json.loads(out.read_text())
    t = load(path)
    assert len(doc["events"]) == t.events.height and len(doc["groups"]) == t.groups.height
    assert doc["trace"]["world_size"] == 4 and doc["events"][0]["op"] == "init_process_group"


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--format", "svg"], "--format 'svg': expected one of perfetto, parquet, json"),
        (["--time", "wall"], "--time 'wall'"),
        (["-o", "/nonexistent-dir/x.json"], "cannot write"),
        (["-o", "."], "is a folder"),
        (["--ranks", "2-9"], "--ranks: [4, 5, 6, 7, 8, 9] outside 0..3"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, msg, tmp_path):
    golden = os.path.join(REPO, "traces", "fsdp.trace")
    full = ["export", golden, *args] + ([] if "-o" in args else ["-o", str(tmp_path / "x.json")])
    p = analyzer(*full, cwd=tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.startswith("error: ") and msg in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_missing_trace(tmp_path):
    p = analyzer("export", str(tmp_path / "nope.trace"), "-o", str(tmp_path / "x.json"))
    assert p.returncode == 2 and "no such file" in p.stderr and "Traceback" not in p.stderr
