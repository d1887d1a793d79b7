"""Blocking semantics, shared by the ordering check and `analyzer hang` (the rest of the package:
replay.py, frontier.py, certificate.py, settle.py, graph.py).

Semantics (documented in README, "Deadlocks and hangs"):
- a collective completes when every member of its group (that has a stream) has entered it,
  matched by the per-group sequence number;
- a blocking send / recv is a rendezvous: it completes when the peer has posted the matching
  recv / send (NCCL-like). With `eager_bytes`, a blocking send of at most that many bytes
  completes at once (the eager protocol of small messages);
- an async op (async_op=True, isend/irecv, batch_isend_irecv, functional collectives) does not
  block where it is issued but at its `wait`.
A rank blocked in a collective waits for every member that has not arrived (MUST's AND arcs);
a deadlock is a cycle of such waits.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from analyzer.trace import Trace
from traceformat.format import COLLECTIVE_OPS

COMM = sorted(COLLECTIVE_OPS | {"send", "recv", "wait"})
_STREAM_COLUMNS = (
    "rank",
    "idx",
    "op",
    "group",
    "seq",
    "peer",
    "async_op",
    "ref",
    "in_bytes",
    "frame",
    "module",
    "phase",
    "step",
)
COLLECTIVE, SEND, RECV, WAIT = 0, 1, 2, 3
_KIND = {"send": SEND, "recv": RECV, "wait": WAIT}  # anything else in COMM is a collective
DRY_RUN_MODES = ("fake", "local")  # recordings that never block; anything else is post-mortem


def post_mortem(trace: Trace) -> bool:
    """Each stream ends where its rank was stuck (FR dumps, a replay, a killed real run)."""
    return trace.header.get("mode") not in DRY_RUN_MODES


@dataclass
class Blocked:
    """Where one rank is stuck: the event it blocks in and the key it waits for."""

    rank: int
    event: dict
    key: tuple
    waits_for: list[int] = field(default_factory=list)
    matched: bool = True
    """Whether every party of `key` issues it somewhere in the trace (False: the wait can never
    end whatever the order -- a missing collective or unmatched p2p, not an ordering problem)."""


def op_key(ev: dict, rank: int) -> tuple:
    if ev["op"] == "send":
        return ("s", ev["group"], rank, ev["peer"], ev["seq"])
    if ev["op"] == "recv":
        return ("r", ev["group"], ev["peer"], rank, ev["seq"])
    return ("c", ev["group"], ev["seq"])


def comm_patterns(trace: Trace) -> pl.DataFrame:
    """The patterns of collectives, p2p ops and waits, op as text, with their `kind`
    (COLLECTIVE, SEND, RECV, WAIT): what the columnar passes below filter events by."""
    return (
        trace.patterns.with_columns(op=pl.col("op").cast(pl.String))
        .filter(pl.col("op").is_in(COMM))
        .with_columns(kind=pl.col("op").replace_strict(_KIND, default=COLLECTIVE, return_dtype=pl.Int8))
    )


def has_p2p(trace: Trace) -> bool:
    """Whether any send / recv was recorded (a pipeline): the ordering certificate's median over
    p2p pairs costs more there than `waitfor.advance`, which decides exactly anyway."""
    return comm_patterns(trace).filter(pl.col("kind").is_in([SEND, RECV])).height > 0


def group_members(trace: Trace) -> dict[int, list[int]]:
    return {g: list(m) for g, m in trace.groups.select("gid", "ranks").iter_rows()}


def waits_for(key: tuple, arrived, members: dict[int, list[int]], present: set) -> list[int]:
    """Whom a rank blocked on `key` waits for: every member not arrived (AND arcs), or the peer."""
    if key[0] == "c":
        return [m for m in members.get(key[1], []) if m in present and m not in arrived]
    return [key[3] if key[0] == "s" else key[2]]
