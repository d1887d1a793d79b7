"""Findings: what a check reports. The JSON shape is a contract (see shared design):
`kind`, `severity`, `message`, `ranks`, `culprit_ranks`, `group`, `seq` at least, then the
fields some kinds add, each under its own name.

Each finding kind is declared once, as a `Kind` at the top of the module that emits it (the
checks in analyzer/checks/), with the properties renderers read (severity, whether it blocks,
whether "expected" means something); a finding holds its Kind, so renderers never test kind
names. The list of every kind is built above the checks (analyzer.checks.KINDS).

Findings are values: a pass that adds to another's finding (hang naming the ranks a cause
leaves waiting, the Flight Recorder numbers) makes a new one (`dataclasses.replace`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ERROR = "error"
WARNING = "warning"
ADVICE = "advice"
"""`analyzer lint`'s severity: the job runs correctly, a change would make it faster."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Kind:
    """One kind of finding and how it is treated."""

    name: str
    """The `kind` of its findings (part of the JSON contract)."""
    about: str
    """What it means, one line (README / --help material)."""
    severity: str = ERROR
    """ERROR, WARNING or ADVICE (lint: never a correctness problem)."""
    blocks: bool = False
    """After it some rank may wait forever (a skipped collective, an unmatched p2p, a deadlock
    cycle, a missing or stalled rank): `analyzer report` then runs the hang analysis."""
    majority: bool = True
    """Its `expected` is what the majority did (shown as such); False where `expected` is a
    description, not a majority (a skipped collective, a group-creation mismatch)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankOutcome:
    """How a failed or missing rank ended (JSON `status` and `error`, both always present)."""

    status: str | None
    """Its status (error, truncated, timed_out, killed, ...); None where nothing says."""
    error: str | None
    """The exception line or the recorder's reason, where there is one."""
    error_text: str | None = None
    """The whole error where its message has more lines than `error` (its first line is
    `error`): every line the rank's exception said (trace format v2.2's end record)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    kind: Kind
    message: str
    ranks: list[int]
    """Every rank involved (e.g. all members of the group)."""
    culprit_ranks: list[int]
    """The ranks that deviate from the majority (both sides where there is no majority)."""
    group: dict | None = None
    """{"name", "label", "ranks"} of the process group, where one applies."""
    seq: int | None = None
    """Per-group sequence number (of the majority's stream) where it applies."""
    op: str | None = None
    expected: Any = None
    """What the majority did (a short description or value)."""
    actual: dict[int, Any] = field(default_factory=dict)
    """What each culprit did instead."""
    frames: dict[int, str] = field(default_factory=dict)
    """User frame (and module) of each culprit's event, and of the majority under key -1."""

    # What some kinds add: None where not set (then absent from the JSON).
    cycle: list[int] | None = None
    """deadlock_cycle: its ranks in wait order, from the lowest."""
    groups: list[dict] | None = None
    """deadlock_cycle: the groups it runs through."""
    p2p_edges: list[list[int]] | None = None
    """deadlock_cycle: the p2p links it runs over, as rank pairs."""
    detail: str | None = None
    """Which case of its kind: skipped / stopped / extra (missing_collective), output side (a
    rank's own output breaks a rule), wrong_peer / no_partner / never_posted (unmatched_p2p)."""
    count: int | None = None
    """missing_collective: how many collectives in the run skipped or added."""
    meant_peer: int | None = None
    """unmatched_p2p, wrong_peer: the rank the op was meant for."""
    waiting: list[int] | None = None
    """missing_rank (dumps): the ranks blocked in the collective the missing rank never joined."""
    state: str | None = None
    """missing_rank (dumps): Flight Recorder's state of that collective."""
    outcome: RankOutcome | None = None
    """failed_rank / missing_rank: how the rank ended."""
    waiting_ranks: list[int] | None = None
    """A root cause of a hang: every rank left waiting because of it, transitively."""
    never_entered: str | None = None
    """stalled_rank: the op it never entered."""
    expected_next: dict | None = None
    """stalled_rank with a golden trace: what it should have run next."""
    seq_numbering: str | None = None
    """Which numbering `seq` is (checks.fr_numbers)."""
    fr: dict | None = None
    """On Flight Recorder dumps: the dump's own numbers of the entries (checks.fr_numbers)."""
    module: str | None = None
    """Lint advice: the module the advised collectives ran under (their common ancestor);
    numerics findings: the module or parameter FQN of the value."""
    frame: str | None = None
    """Lint advice: the user frame that issued them (the first)."""
    per_step: int | None = None
    """Lint advice: how many of the advised collectives one rank runs per step (the most)."""
    seconds_per_step: float | None = None
    """Lint advice with a cluster: the communication time per step the advice would save."""
    step: int | None = None
    """Numerics findings: the step where the value first differs."""
    phase: str | None = None
    """Numerics findings: forward / backward / optimizer."""
    numerics: dict | None = None
    """Numerics findings: what was compared (value, error vs tolerance, the collectives around)."""

    @property
    def severity(self) -> str:
        """ERROR, WARNING or ADVICE: its kind's."""
        return self.kind.severity

    def to_json(self) -> dict:
        out = {
            "kind": self.kind.name,
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
        _set(
            out,
            cycle=self.cycle,
            groups=self.groups,
            p2p_edges=self.p2p_edges,
            detail=self.detail,
            count=self.count,
            meant_peer=self.meant_peer,
            waiting=self.waiting,
            state=self.state,
        )
        if self.outcome is not None:  # the keys always, null where unknown
            out["status"], out["error"] = self.outcome.status, self.outcome.error
            out["error_text"] = self.outcome.error_text
        _set(
            out,
            waiting_ranks=self.waiting_ranks,
            never_entered=self.never_entered,
            expected_next=self.expected_next,
            seq_numbering=self.seq_numbering,
            fr=self.fr,
            module=self.module,
            frame=self.frame,
            per_step=self.per_step,
            seconds_per_step=self.seconds_per_step,
            step=self.step,
            phase=self.phase,
            numerics=self.numerics,
        )
        return out


def _set(out: dict, **values: Any) -> None:
    """Add the values that are set, in the order given (the JSON's key order is part of its shape)."""
    out.update((name, value) for name, value in values.items() if value is not None)
