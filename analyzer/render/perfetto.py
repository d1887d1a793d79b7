"""Chrome trace / Perfetto JSON: open the file in ui.perfetto.dev (or chrome://tracing).

Layout: one process per rank ("rank N", pid N + 1: Perfetto treats pid 0 as the kernel's
swapper), one thread track per process group it used (named by mesh dim and members; a `wait`
sits on the track of the op it waits for), plus one "rank-local" track for events without a
group (mesh slicing, DTensor redistributions). Every event is a complete ("X") slice whose args
hold op, group, seq, peer, dtype, shapes, bytes, module, phase, step and frame. Each matched
send / recv pair (same pairing as the p2p check: group, src, dst, per-pair seq) is a flow arrow
("s" at the send, "f" with bp="e" at the recv).

Time: a dry run never ran for real, so its time is logical: one event = 1 µs, ts = idx in
program order. Post-mortem traces (Flight Recorder dumps, replays) carry real timestamps, which
are used as they are (slices last until the rank's next event). `time="logical"|"real"` forces
either.

Columnar: the slices, flows and names are polars frames serialized with `write_ndjson`; no
Python object is built per event.
"""

from __future__ import annotations

import json
from typing import IO, Any, cast

import polars as pl

from analyzer.model.text import ranks_text
from analyzer.model.trace import Trace
from analyzer.render.frames import events_frame, group_labels
from analyzer.waitfor.semantics import post_mortem
from traceformat.ops import COLLECTIVE_OPS, GROUP_OPS, P2P_OPS

LOGICAL_SLICE_US = 0.8
"""Width of a slice in logical time, where events sit 1 µs apart (the gap keeps them apart)."""
REAL_FILL = 0.9
"""In real time a slice covers this share of the gap to its rank's next event."""
LOCAL_TID = 1
"""Track of a rank's events without a process group; group gid g is track g + 2 (tid 0 is
special to Perfetto, as pid 0 is)."""
ARG_COLUMNS = (
    "rank",
    "idx",
    "op",
    "group",
    "track",
    "seq",
    "peer",
    "tag",
    "dtype",
    "in_shapes",
    "out_shapes",
    "in_bytes",
    "out_bytes",
    "reduce_op",
    "async_op",
    "splits",
    "info",
    "module",
    "phase",
    "step",
    "frame",
    "ref",
)
_WHERE = ("module", "phase", "step", "frame", "idx")
_TENSORS = ("dtype", "in_shapes", "out_shapes", "in_bytes", "out_bytes", "async_op")
ARGS = {  # per category, only the fields that mean something there (Perfetto shows every key)
    "collective": ("op", "group", "gid", "seq", *_TENSORS, "reduce_op", "root", "splits", *_WHERE),
    "p2p": ("op", "group", "gid", "seq", "peer", "tag", *_TENSORS, *_WHERE),
    "wait": ("op", "group", "gid", "waits_on_idx", *_WHERE),
    "group": ("op", "group", "gid", "info", *_WHERE),
    "other": ("op", "info", "dtype", "in_shapes", *_WHERE),
}


def uses_real_time(trace: Trace, time: str = "auto") -> bool:
    """Real timestamps for post-mortem traces that have them; logical time for dry runs."""
    if time != "auto":
        return time == "real"
    ts = trace.events["ts"]
    lo, hi = cast(Any, ts.min()), cast(Any, ts.max())  # polars types a column max as any literal
    return post_mortem(trace) and ts.len() > 0 and float(hi) - float(lo) > 0


def _category() -> pl.Expr:
    op = pl.col("op")
    return (
        pl.when(op.is_in(sorted(COLLECTIVE_OPS)))
        .then(pl.lit("collective"))
        .when(op.is_in(sorted(P2P_OPS)))
        .then(pl.lit("p2p"))
        .when(op == "wait")
        .then(pl.lit("wait"))
        .when(op.is_in(sorted(GROUP_OPS)))
        .then(pl.lit("group"))
        .otherwise(pl.lit("other"))
    )


def slices(trace: Trace, real: bool) -> pl.DataFrame:
    """One row per event: ph, name, cat, ts (µs), dur, pid, tid, group_label and the raw columns
    the args and the flows are made of."""
    ev = events_frame(trace)
    # a wait belongs on the track of the op it waits for (same rank, idx = its ref)
    targets = ev.select("rank", ref="idx", target_group="group", target_op="op")
    ev = ev.join(targets, on=["rank", "ref"], how="left").with_columns(
        track=pl.when(pl.col("op") == "wait").then("target_group").otherwise("group")
    )
    if real:
        ev = ev.sort("rank", "ts", "idx").with_columns(ts_us=pl.col("ts") * 1e6)
        gap = pl.col("ts_us").shift(-1).over("rank") - pl.col("ts_us")
        ev = ev.with_columns(dur=(gap.clip(lower_bound=0) * REAL_FILL).fill_null(1.0))
    else:
        ev = ev.sort("rank", "idx").with_columns(ts_us=pl.col("idx").cast(pl.Float64), dur=pl.lit(LOGICAL_SLICE_US))
    name = (
        pl.when(pl.col("op") == "send")
        .then(pl.format("send → {}", "peer"))
        .when(pl.col("op") == "recv")
        .then(pl.format("recv ← {}", "peer"))
        .when(pl.col("op") == "wait")
        .then(pl.format("wait ({})", "target_op"))
        .otherwise(pl.col("op"))
    )
    return ev.select(  # positional columns come first, as Python passes them
        *ARG_COLUMNS,
        ph=pl.lit("X"),
        name=name,
        cat=_category(),
        ts="ts_us",
        dur="dur",
        pid=pl.col("rank") + 1,
        tid=pl.when(pl.col("track") >= 0).then(pl.col("track") + 2).otherwise(pl.lit(LOCAL_TID)),
        group_label=group_labels(trace, "track"),
    )


def _arg(name: str) -> pl.Expr:
    special = {
        "group": pl.col("group_label"),
        "gid": pl.when(pl.col("track") >= 0).then("track"),
        "root": pl.when(pl.col("peer") >= 0).then("peer"),
        "async_op": pl.col("async_op") == 1,
        "waits_on_idx": pl.col("ref"),
    }
    return special.get(name, pl.col(name)).alias(name)


def slice_frames(sl: pl.DataFrame) -> list[pl.DataFrame]:
    """The "X" events, one frame per category so each carries only its own args."""
    out = []
    for cat, fields in ARGS.items():
        part = sl.filter(pl.col("cat") == cat)
        if part.height:
            out.append(
                part.select("ph", "name", "cat", "ts", "dur", "pid", "tid", args=pl.struct(*[_arg(f) for f in fields]))
            )
    return out


def flows(sl: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """("s" events, "f" events) of every matched send -> recv pair, ids 1..n in one join."""
    keys = ["group", "src", "dst", "seq"]
    sends = sl.filter(pl.col("op") == "send").select("group", "seq", "ts", "dur", "pid", "tid", src="rank", dst="peer")
    recvs = sl.filter((pl.col("op") == "recv") & (pl.col("peer") >= 0)).select(
        "group", "seq", "ts", "dur", "pid", "tid", src="peer", dst="rank"
    )
    pairs = (
        sends.join(recvs, on=keys, how="inner", suffix="_r")
        .sort(keys)
        .with_row_index("id", offset=1)
        .with_columns(pl.col("id").cast(pl.Int64))
    )
    common: dict[str, Any] = dict(cat=pl.lit("p2p"), name=pl.lit("send → recv"), id="id")
    # each end sits mid-slice, so "enclosing slice" binding (bp="e") finds its send / recv
    start = pairs.select(ph=pl.lit("s"), **common, ts=pl.col("ts") + pl.col("dur") / 2, pid="pid", tid="tid")
    finish = pairs.select(
        ph=pl.lit("f"), bp=pl.lit("e"), **common, ts=pl.col("ts_r") + pl.col("dur_r") / 2, pid="pid_r", tid="tid_r"
    )
    return start, finish


def names(trace: Trace, sl: pl.DataFrame) -> list[pl.DataFrame]:
    """ "M" metadata: process_name "rank N" and thread_name per used track, with sort indices."""
    track_names = {LOCAL_TID: "rank-local (mesh, redistribute)"}
    for g in trace.groups.iter_rows(named=True):  # one per group, not per event
        track_names[g["gid"] + 2] = f"{g['label']} (ranks {ranks_text(g['ranks'])})"
    lookup = pl.DataFrame(
        {"tid": list(track_names), "track_name": list(track_names.values())},
        schema={"tid": pl.Int32, "track_name": pl.String},
    )
    procs = sl.select("pid").unique().sort("pid")
    tracks = sl.select("pid", "tid").unique().sort("pid", "tid").join(lookup, on="tid", how="left")
    meta = pl.lit("M")
    return [
        procs.select(
            ph=meta,
            name=pl.lit("process_name"),
            ts=pl.lit(0.0),
            pid="pid",
            tid=pl.lit(LOCAL_TID),
            args=pl.struct(name=pl.format("rank {}", pl.col("pid") - 1)),
        ),
        procs.select(
            ph=meta,
            name=pl.lit("process_sort_index"),
            ts=pl.lit(0.0),
            pid="pid",
            tid=pl.lit(LOCAL_TID),
            args=pl.struct(sort_index="pid"),
        ),
        tracks.select(
            ph=meta,
            name=pl.lit("thread_name"),
            ts=pl.lit(0.0),
            pid="pid",
            tid="tid",
            args=pl.struct(name=pl.col("track_name").fill_null(pl.format("group {}", pl.col("tid") - 2))),
        ),
        tracks.select(
            ph=meta,
            name=pl.lit("thread_sort_index"),
            ts=pl.lit(0.0),
            pid="pid",
            tid="tid",
            args=pl.struct(sort_index="tid"),
        ),
    ]


def write_perfetto(trace: Trace, out: IO[str], time: str = "auto") -> dict:
    """Write the JSON object format ({"traceEvents": [...], "otherData": {...}}); returns counts."""
    real = uses_real_time(trace, time)
    sl = slices(trace, real)
    start, finish = flows(sl)
    meta = names(trace, sl)
    parts = [*meta, *slice_frames(sl), start, finish]
    other = {
        "source": "commtrace",
        "world_size": trace.world_size,
        "mode": trace.header.get("mode"),
        "program": (trace.header.get("config") or {}).get("program"),
        "time": "real (seconds since the first event)" if real else "logical: 1 us = one event, ts = idx",
    }
    out.write('{"displayTimeUnit": "ns", "otherData": ' + json.dumps(other) + ',\n"traceEvents": [\n')
    first = True
    for frame in parts:
        if frame.is_empty():
            continue
        body = frame.write_ndjson().rstrip("\n").replace("\n", ",\n")
        out.write(body if first else ",\n" + body)
        first = False
    out.write("\n]}\n")
    return {"slices": sl.height, "flows": start.height, "tracks": meta[2].height, "real_time": real}
