"""Who is the culprit of sends and recvs that nobody matches: one verdict for `check` (p2p.py)
and `hang` (which adopts these findings as root causes of the waits they cause).

- A wrong peer: a send s -> d that no recv matches while a recv on d' from s (d' != d) has no
  send: one fix on rank s (send to d') matches both, so s addressed the wrong peer; likewise a
  recv on d from s with no send while a send s' -> d (s' != s) has no recv: d named the wrong
  source. One finding, culprit s (or d), covering both ops.
- Otherwise, in a dry run (every stream runs to the end of its program), the rank that issued
  the op nobody matches is the culprit: its partner's whole program never posts the other side.
- In a post-mortem (FR dumps, a killed run: each stream ends where its rank was stuck), an op
  whose partner has not posted the other side yet is only unmatched because that partner never
  got there. If the partner is blocked itself (at an earlier op of its stream), the op is a
  symptom of that block, whose own root cause is reported; if it is not blocked in any recorded
  op (stuck in compute, or dead), the partner is the culprit: it never posted the recv (send)
  the other rank is stuck in. Every rank that waits on it, transitively, is listed.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from analyzer.model.findings import Finding, Kind
from analyzer.model.text import group_text, ranks_text
from analyzer.model.trace import Trace
from analyzer.waitfor.frontier import frontier
from analyzer.waitfor.graph import wait_graph
from analyzer.waitfor.progress import last_comm
from analyzer.waitfor.semantics import Blocked, WaitKey, post_mortem

UNMATCHED_P2P = Kind(name="unmatched_p2p", about="a send without its recv or a recv without its send", blocks=True)


@dataclass(frozen=True, slots=True)
class Unmatched:
    """One send or recv without its other side."""

    gid: int
    src: int
    dst: int
    seq: int
    send: bool
    frame: str

    @property
    def issuer(self) -> int:
        return self.src if self.send else self.dst

    @property
    def partner(self) -> int:
        return self.dst if self.send else self.src

    @property
    def key(self) -> WaitKey:
        return WaitKey("s" if self.send else "r", self.gid, self.seq, self.src, self.dst)

    def text(self, groups: dict) -> str:
        """`rank 2's send #0 to rank 0 on world (ranks 0-3) (frame)`."""
        way = f"send #{self.seq} to" if self.send else f"recv #{self.seq} from"
        return f"rank {self.issuer}'s {way} rank {self.partner} on {group_text(groups.get(self.gid))} ({self.frame})"


def causes(trace: Trace, ops: list[Unmatched], groups: dict) -> list[tuple[Finding, set[WaitKey]]]:
    """Findings for the unmatched ops (module doc), each with the p2p keys it explains."""
    present = set(trace.ranks)
    ops = [u for u in ops if u.partner in present]  # a partner without a stream: a missing rank
    pairs, lone = _wrong_peers(ops)
    stuck, graph = _frontier(trace) if post_mortem(trace) else (None, None)
    out = [(_wrong_peer(wrong, meant, groups, stuck, graph), {wrong.key, meant.key}) for wrong, meant in pairs]
    for u in lone:
        if stuck is None:
            out.append((_no_partner(u, groups), {u.key}))
        elif u.partner not in stuck:  # not blocked in any recorded op: it never got there
            out.append((_never_posted(trace, u, groups, stuck, graph), {u.key}))
        # else: the partner is blocked earlier in its own stream; that block's root cause is reported
    return out


def _wrong_peers(ops: list[Unmatched]) -> tuple[list[tuple[Unmatched, Unmatched]], list[Unmatched]]:
    """(wrong op, the op it was meant to match) pairs, in stream order, and the ops left alone."""
    order = sorted(ops, key=lambda u: (u.gid, u.seq, u.src, u.dst, u.send))
    used: set[Unmatched] = set()
    pairs = []
    # a sender addressed the wrong peer: its send to d, and a recv from it on d' != d
    for side in (True, False):  # senders first, then receivers that named the wrong source
        for wrong in order:
            if wrong.send != side or wrong in used:
                continue
            me = wrong.issuer
            meant = next(
                (
                    u
                    for u in order
                    if u not in used
                    and u.send != side
                    and u.gid == wrong.gid
                    and u.partner == me
                    and u.issuer != wrong.partner
                ),
                None,
            )
            if meant is not None:
                used |= {wrong, meant}
                pairs.append((wrong, meant))
    return pairs, [u for u in order if u not in used]


def _frontier(trace: Trace) -> tuple[dict[int, Blocked], nx.DiGraph]:
    stuck = frontier(trace)
    return stuck, wait_graph(stuck)


def _waiting(graph: nx.DiGraph | None, rank: int, stuck: dict | None) -> list[int]:
    """Ranks stuck because of `rank` (post-mortem): itself when blocked, and all that wait on it."""
    if graph is None or rank not in graph:
        return []
    return sorted(nx.ancestors(graph, rank) | ({rank} if stuck and rank in stuck else set()))


def _wait_text(waiting: list[int]) -> str:
    if not waiting:
        return ""
    return f"; {len(waiting)} rank{'s' if len(waiting) > 1 else ''} stuck because of it ({ranks_text(waiting)})"


def _wrong_peer(wrong: Unmatched, meant: Unmatched, groups: dict, stuck: dict | None, graph) -> Finding:
    culprit = wrong.issuer
    waiting = _waiting(graph, culprit, stuck)
    what = "send" if wrong.send else "recv"
    to = "to" if wrong.send else "from"
    return Finding(
        kind=UNMATCHED_P2P,
        ranks=sorted({wrong.src, wrong.dst, meant.src, meant.dst} | set(waiting)),
        culprit_ranks=[culprit],
        group=groups.get(wrong.gid),
        seq=wrong.seq,
        op=what,
        expected=f"{what} {to} rank {meant.issuer}",
        actual={culprit: f"{what} {to} rank {wrong.partner}"},
        frames={culprit: wrong.frame, meant.issuer: meant.frame},
        message=(
            f"rank {culprit} {'sends to' if wrong.send else 'receives from'} the wrong peer: {wrong.text(groups)} "
            f"has no matching {'recv' if wrong.send else 'send'} (rank {wrong.partner} never "
            f"{'receives from' if wrong.send else 'sends to'} rank {culprit}), while {meant.text(groups)} has "
            f"none either: it was meant for rank {meant.issuer}" + _wait_text(waiting)
        ),
        detail="wrong_peer",
        meant_peer=meant.issuer,
        waiting_ranks=waiting if graph is not None else None,
    )


def _no_partner(u: Unmatched, groups: dict) -> Finding:
    op, partner = ("send", "recv") if u.send else ("recv", "send")
    return Finding(
        kind=UNMATCHED_P2P,
        ranks=sorted({u.src, u.dst}),
        culprit_ranks=[u.issuer],
        group=groups.get(u.gid),
        seq=u.seq,
        op=op,
        expected=f"a matching {partner} on rank {u.partner}",
        actual={u.issuer: op},
        frames={u.issuer: u.frame},
        message=(
            f"{u.text(groups)} has no matching {partner}: rank {u.partner} never {'receives' if u.send else 'sends'} it"
        ),
        detail="no_partner",
    )


def _never_posted(trace: Trace, u: Unmatched, groups: dict, stuck: dict, graph: nx.DiGraph) -> Finding:
    culprit, partner = u.partner, ("recv" if u.send else "send")
    waiting = _waiting(graph, culprit, stuck)
    last = last_comm(trace, culprit)
    blocked = "is blocked in it" if u.issuer in stuck else "posted it"
    return Finding(
        kind=UNMATCHED_P2P,
        ranks=sorted({u.src, u.dst} | set(waiting)),
        culprit_ranks=[culprit],
        group=groups.get(u.gid),
        seq=u.seq,
        op=partner,
        expected=f"rank {culprit} posts the {partner} matching {u.text(groups)}",
        actual={culprit: last or "nothing recorded"},
        frames={u.issuer: u.frame},
        message=(
            f"rank {culprit} never posted the {partner} matching {u.text(groups)}: rank {u.issuer} {blocked}, and "
            f"rank {culprit} is not blocked in any recorded op (stuck in compute, or dead); its last recorded op "
            f"was {last or 'none'}" + _wait_text(waiting)
        ),
        detail="never_posted",
        waiting_ranks=waiting,
    )
