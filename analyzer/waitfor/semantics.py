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
from typing import NamedTuple

import polars as pl

from analyzer.model.text import group_text
from analyzer.model.trace import Trace
from traceformat.ops import COLLECTIVE_OPS, P2P_OPS, WAIT_OPS

COMM = sorted(COLLECTIVE_OPS | P2P_OPS | WAIT_OPS)
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


def post_mortem(trace: Trace) -> bool:
    """Each stream ends where its rank was stuck (FR dumps, a replay, a killed real run): any
    trace but a dry run, which never blocks."""
    return trace.mode is None or not trace.mode.dry_run


class WaitKey(NamedTuple):
    """What a blocked rank waits for: one instance of a collective (kind "c": group, seq), or one
    side of a p2p transfer (kind "s" send / "r" recv: group, seq, src, dst; p2p is numbered per
    (group, src, dst) on both sides, so both sides' keys differ only in kind)."""

    kind: str
    group: int
    seq: int
    src: int = -1
    dst: int = -1

    @classmethod
    def of(cls, ev: dict, rank: int) -> WaitKey:
        """The key of `rank`'s event `ev` (a dict with op, group, seq, peer)."""
        if ev["op"] == "send":
            return cls("s", ev["group"], ev["seq"], rank, ev["peer"])
        if ev["op"] == "recv":
            return cls("r", ev["group"], ev["seq"], ev["peer"], rank)
        return cls("c", ev["group"], ev["seq"])

    @property
    def collective(self) -> bool:
        return self.kind == "c"

    def partner(self) -> WaitKey:
        """The other side of a p2p key (a send's recv, a recv's send)."""
        return self._replace(kind="r" if self.kind == "s" else "s")

    def peer(self) -> int:
        """The rank a p2p side waits for."""
        return self.dst if self.kind == "s" else self.src

    def text(self, groups: dict, op: str = "collective", arrow: str = "->", label_only: bool = False) -> str:
        """`all_reduce #3 on dp (ranks 0-3)` (`op` names a collective), `send #0 1->2 on pp (ranks
        0-3)`; label_only: `on dp`. `groups`: gid -> group dict (checks.common.group_table)."""
        group = groups.get(self.group)
        where = (group["label"] if group else "?") if label_only else group_text(group)
        if self.collective:
            return f"{op} #{self.seq} on {where}"
        return f"{'send' if self.kind == 's' else 'recv'} #{self.seq} {self.src}{arrow}{self.dst} on {where}"


@dataclass
class Blocked:
    """Where one rank is stuck: the event it blocks in and the key it waits for."""

    rank: int
    event: dict
    key: WaitKey
    waits_for: list[int] = field(default_factory=list)
    matched: bool = True
    """Whether every party of `key` issues it somewhere in the trace (False: the wait can never
    end whatever the order -- a missing collective or unmatched p2p, not an ordering problem)."""


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


def with_waits(trace: Trace, frame: pl.DataFrame, ev: pl.DataFrame, pats: pl.DataFrame) -> pl.DataFrame:
    """`frame` (rows with rank, idx) plus `wait_idx`: where the rank waits on that op (null: no
    wait, e.g. a blocking op). `ev`: the events with their pattern `kind` (of `pats`, a
    comm_patterns table), waits included."""
    waits = trace.with_patterns(
        ev.filter(pl.col("kind") == WAIT).select("rank", "idx", "code"), "ref", table=pats
    ).select("rank", idx="ref", wait_idx="idx")
    return frame.join(waits, on=["rank", "idx"], how="left")


def group_members(trace: Trace) -> dict[int, list[int]]:
    return {g: list(m) for g, m in trace.groups.select("gid", "ranks").iter_rows()}


def waits_for(key: WaitKey, arrived, members: dict[int, list[int]], present: set) -> list[int]:
    """Whom a rank blocked on `key` waits for: every member not arrived (AND arcs), or the peer."""
    if key.collective:
        return [m for m in members.get(key.group, []) if m in present and m not in arrived]
    return [key.peer()]
