"""Findings about one position of a group's collective stream, gathered as the collectives check
(collectives.py, shape_rules.py) meets each deviating rank: ranks that deviate alike at a
position share one finding, written once they have all joined."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from analyzer.model.findings import Finding, Kind


@dataclasses.dataclass(kw_only=True, slots=True)
class _Draft:
    """A finding being gathered: the ranks that deviate alike at one position join it."""

    kind: Kind
    gid: int
    pos: int | None
    op: str
    expected: Any
    members: list[int]
    message: Callable[[Finding], str]
    """The message, written once every culprit has joined (it names them)."""
    detail: str | None
    count: int | None
    culprits: list[int] = dataclasses.field(default_factory=list)
    actual: dict[int, Any] = dataclasses.field(default_factory=dict)
    frames: dict[int, str] = dataclasses.field(default_factory=dict)
    note: str = ""
    """Appended to the message: how its culprits were decided, where the group could not."""

    def finding(self, group: dict) -> Finding:
        f = Finding(
            kind=self.kind,
            message="",
            ranks=list(self.members),
            culprit_ranks=sorted(self.culprits),
            group=group,
            seq=self.pos,
            op=self.op,
            expected=self.expected,
            actual=self.actual,
            frames=self.frames,
            detail=self.detail,
            count=self.count,
        )
        return dataclasses.replace(f, message=self.message(f) + self.note)


class PositionFindings:
    """Findings keyed by (kind, group, position, detail) so that ranks deviating alike share one."""

    def __init__(self, groups: dict):
        self.groups = groups
        self.found: dict[tuple, _Draft] = {}

    def add(
        self,
        kind: Kind,
        gid: int,
        pos: int | None,
        rank: int,
        *,
        op,
        expected,
        actual,
        frame: str,
        members: list[int],
        message,
        rep_frame: str | None = None,
        detail: str | None = None,
        count: int | None = None,
    ) -> None:
        key = (kind, gid, pos, detail)
        d = self.found.get(key)
        if d is None:
            d = self.found[key] = _Draft(
                kind=kind,
                gid=gid,
                pos=pos,
                op=op,
                expected=expected,
                members=members,
                message=message,
                detail=detail,
                count=count,
            )
            if rep_frame:
                d.frames[-1] = rep_frame
        if rank not in d.culprits:
            d.culprits.append(rank)
        d.actual[rank] = actual
        d.frames[rank] = frame

    def ties(self, contested: dict[int, list[int]]) -> dict[int, tuple[list[int], set[str]]]:
        """Of the contested groups (gid -> members), those whose every finding names all of
        its members (a tie), with the kinds found: gid -> (members, kinds)."""
        out: dict[int, tuple[list[int], set[str]]] = {}
        spoilt: set[int] = set()
        for d in self.found.values():
            members = contested.get(d.gid)
            if members is None:
                continue
            if sorted(d.culprits) != sorted(members):  # decided in the group itself (a stopped rank)
                spoilt.add(d.gid)
            out.setdefault(d.gid, (members, set()))[1].add(d.kind.name)
        return {gid: tie for gid, tie in out.items() if gid not in spoilt}

    def drop_group(self, gid: int) -> None:
        """Forget every finding of a group (it is aligned again)."""
        self.found = {k: d for k, d in self.found.items() if d.gid != gid}

    def narrow_ties(self, kind: Kind, tie_culprits, note) -> None:
        """Findings of `kind` that name every member of their group (a tie, e.g. an all_to_all
        pair's disagreement in a 2-rank group, where no majority exists) narrowed to the ranks the
        ties across groups single out (`tie_culprits`, by position: each finding is one tie);
        `note(culprits, gids)` says how, after the message."""
        tied = [
            d
            for d in self.found.values()
            if d.kind is kind and len(d.members) > 1 and sorted(d.culprits) == sorted(d.members)
        ]
        decided = tie_culprits({i: (d.members, {kind.name}) for i, d in enumerate(tied)})
        for i, (culprits, by) in decided.items():
            d = tied[i]
            d.culprits = list(culprits)
            d.actual = {r: v for r, v in d.actual.items() if r in culprits}
            d.frames = {r: v for r, v in d.frames.items() if r in culprits or r < 0}
            d.note = note(culprits, sorted({tied[j].gid for j in by}))

    def note(self, gid: int, text: str) -> None:
        """Append `text` to the message of every finding of a group found so far."""
        for d in self.found.values():
            if d.gid == gid:
                d.note = text

    def findings(self) -> list[Finding]:
        # a rank whose own output breaks output = input is the culprit of the cross-rank
        # difference at that position too: the cross-rank finding is dropped, not repeated
        own = {(k[0], k[1], k[2]): set(d.culprits) for k, d in self.found.items() if k[3] == "output side"}
        for key, d in list(self.found.items()):
            side = own.get((key[0], key[1], key[2])) if key[3] is None else None
            if side and (set(d.culprits) <= side or len(d.culprits) == len(d.members)):
                del self.found[key]
        out = [d.finding(self.groups[d.gid]) for d in self.found.values()]
        return sorted(
            out, key=lambda f: (f.group["label"] if f.group else "", f.seq if f.seq is not None else -1, f.kind.name)
        )
