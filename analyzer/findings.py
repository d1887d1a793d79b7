"""Findings: what a check reports. The JSON shape is a contract (see shared design):
`kind`, `severity`, `message`, `ranks`, `culprit_ranks`, `group`, `seq` at least."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from traceformat.ranks import ranks_text  # noqa: F401  (culprits are printed with it everywhere)


@dataclass
class Finding:
    kind: str
    message: str
    ranks: list[int]
    """Every rank involved (e.g. all members of the group)."""
    culprit_ranks: list[int]
    """The ranks that deviate from the majority (both sides where there is no majority)."""
    group: dict | None = None
    """{"name", "label", "ranks"} of the process group, where one applies."""
    seq: int | None = None
    """Per-group sequence number (of the majority's stream) where it applies."""
    severity: str = "error"
    op: str | None = None
    expected: Any = None
    """What the majority did (a short description or value)."""
    actual: dict[int, Any] = field(default_factory=dict)
    """What each culprit did instead."""
    frames: dict[int, str] = field(default_factory=dict)
    """User frame (and module) of each culprit's event, and of the majority under key -1."""
    extra: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        out = {
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
            "ranks": sorted(self.ranks),
            "culprit_ranks": sorted(self.culprit_ranks),
            "group": self.group,
            "seq": self.seq,
            "op": self.op,
            "expected": self.expected,
            "actual": {str(k): v for k, v in self.actual.items()},
            "frames": {str(k): v for k, v in self.frames.items()},
        }
        out.update(self.extra)
        return out


def group_text(group: dict | None) -> str:
    if not group:
        return "-"
    return f"{group['label']} (ranks {ranks_text(group['ranks'])})"
