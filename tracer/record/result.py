"""What a recording gives back (RecordResult), how an interrupted one says what it kept, and
the verdict on the ranks that failed (failure_lines).

A recording where ranks failed never replaces a trace that is already there: its partial trace
goes beside it (failed_path: x.trace -> x.failed.trace); with no trace there yet (or a device
such as /dev/null) it goes to the asked path itself, nothing being lost.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field

from traceformat.ranks import ranks_text


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM while recording (the CLI turns SIGTERM into this); `signum` says which."""

    def __init__(self, signum: int = signal.SIGINT, message: str = ""):
        super().__init__(message)
        self.signum = signum
        self.message = message


def failed_path(out: str) -> str:
    """Where a failed recording's partial trace goes when `out` holds a trace: x.trace -> x.failed.trace."""
    root, ext = os.path.splitext(out)
    return f"{root}.failed{ext}" if ext else f"{out}.failed"


@dataclass(frozen=True, slots=True)
class RankFailure:
    """One asked rank that did not finish cleanly."""

    rank: int
    """The rank."""
    why: str
    """One line: the program's error, its exit status and last words, the signal, the timeout."""
    log: str
    """The rank's log (its stdout, stderr and traceback)."""
    ended: float
    """When it stopped writing (its part's mtime; inf when unknown): the earliest failure is
    the one to show."""
    more: int = 0
    """Lines of its error past `why`, kept whole in the trace (the end record's error_text)."""

    @property
    def caused_by_peer(self) -> bool:
        """It failed waiting for a message from a rank that had failed or finished (a
        consequence, not the cause: tracer/fake/channel.py's ChannelError), or, in local
        mode, stopped with the simulated ranks whose arguments were rejected (STOPPED_WITH)."""
        return self.why.startswith(("ChannelError:", STOPPED_WITH))


STOPPED_WITH = "stopped with rank"
"""How a local-mode rank that stopped because other simulated ranks raised says so (one process
runs them all): tracer/modes/run.py writes it, failure_lines shows it as a consequence."""


def more_lines(n: int) -> str:
    """Where the rest of a many-line error is: '2 more lines of the error in the trace
    (analyzer check --json: error_text)'; "" for none."""
    if n <= 0:
        return ""
    return f"{n} more line{'s' if n > 1 else ''} of the error in the trace (analyzer check --json: error_text)"


def failure_lines(failures: dict[int, RankFailure]) -> list[str]:
    """The verdict on the failed ranks, at most two lines: the first real error (not one caused
    by another rank's death; the earliest; the lowest rank) with every rank that failed the same
    way, then how many others failed otherwise."""
    if not failures:
        return []
    first = min(failures.values(), key=lambda f: (f.caused_by_peer, f.ended, f.rank))
    same = sorted(r for r, f in failures.items() if f.why == first.why)
    logs = sorted({failures[r].log for r in same})
    where = f"log: {logs[0]}" if len(logs) == 1 else f"logs: {logs[0]} and {len(logs) - 1} more"
    who = f"rank {same[0]}" if len(same) == 1 else f"ranks {ranks_text(same)}"
    kept = more_lines(first.more)
    lines = [f"{who}: {first.why} ({kept + '; ' if kept else ''}{where})"]
    rest = sorted(set(failures) - set(same))
    if rest:
        why = (
            "stopped with it: local mode runs every rank in one process"
            if all(failures[r].why.startswith(STOPPED_WITH) for r in rest)
            else "waiting for a rank that stopped"
            if all(failures[r].caused_by_peer for r in rest)
            else "other reasons: see their logs"
        )
        lines.append(f"{len(rest)} more rank{'s' if len(rest) > 1 else ''} failed: {ranks_text(rest)} ({why})")
    return lines


@dataclass(kw_only=True, slots=True)
class RecordResult:
    out: str
    """The trace asked for."""
    ranks: list[int]
    """Ranks recorded."""
    n_events: dict[int, int] = field(default_factory=dict)
    """Events per rank."""
    errors: dict[int, str] = field(default_factory=dict)
    """One line per rank that did not finish cleanly ("rank 2: why (log: ...)")."""
    failures: dict[int, RankFailure] = field(default_factory=dict)
    """The same ranks, each with its reason, log and time (failure_lines says them)."""
    seconds: float = 0.0
    """Wall time of the recording."""
    compute: dict[int, str] = field(default_factory=dict)
    """"fake" or "real" per rank: how its tensor math ran."""
    notes: list[str] = field(default_factory=list)
    """Things the user should know (e.g. ranks re-recorded with real compute), one line each."""
    peak_rss: dict[int, int] = field(default_factory=dict)
    """Peak resident memory of each recording process, bytes, by the first rank it recorded
    (its own high-water mark, measured by the process itself: executors.shared.own_peak_bytes)."""
    written: bool = False
    """Whether a trace was written (False when no rank recorded anything: the old file stays)."""
    path: str = ""
    """Where it was written: `out`, or failed_path(out) when ranks failed and `out` held a
    trace (kept as it was)."""
    derived: dict[int, int] = field(default_factory=dict)
    """Ranks derived by relabelling (not recorded), each with the rank it was derived from."""
