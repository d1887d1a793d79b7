"""No silent hang: a rank blocked in group creation or a collective says so while it waits.

The blocking calls of every mode say what they wait for (`blocking(op, group, waits_for)`):
creating a group (c10d's new_group, every mode; real mode's gloo connecting to the group's
peers), real mode's gloo ops (the Work's wait), fake mode's channel (a carried object collective
waiting for its sender). One thread per rank process looks at the call running now once a
second; one blocked longer than `NOTICE_AFTER` seconds gets one line, written while it still
waits, where the person running `tracer record` sees it (the terminal the rank process was
started from, `TERMINAL`) and into the rank's own log:

    rank 2 waits in all_reduce on group 0 (ranks 0-3) for ranks 0, 1, 3 (10 s so far)

Nothing is written for a call that ends sooner, so a healthy run prints nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from dataclasses import dataclass

NOTICE_AFTER = 5.0
"""Seconds a call may block before its line is written (a real gloo op on a loaded CPU takes
well under one; connecting a group's peers a few hundred milliseconds)."""

TERMINAL: list[int | None] = [None]
"""The file descriptor of the terminal the rank process was started from (its stdout and stderr
go to its log): set by the executor that started it; None: the log only."""


@dataclass(kw_only=True, slots=True)
class Blocked:
    """One blocking call of this rank process."""

    op: str
    """What it runs: 'all_reduce', 'new_group', 'recv_object_list', ..."""
    group: str
    """The group it runs on, as the line names it: 'group 0 (ranks 0-3)' ('': `op` names it)."""
    waits_for: tuple[int, ...]
    """The global ranks it waits for (its group's other members, or the one sender)."""
    since: float
    """time.monotonic() when it started."""
    said: bool = False
    """Its line was written."""


_RANK: list[int] = [-1]
_NOW: list[Blocked] = []
_LOCK = threading.Lock()
_THREAD: list[threading.Thread] = []


def start(rank: int) -> None:
    """This process is global rank `rank`: start its watchdog thread (once)."""
    _RANK[0] = rank
    if _THREAD:
        return
    t = threading.Thread(target=_watch, name="commtrace-watchdog", daemon=True)
    _THREAD.append(t)
    t.start()


@contextlib.contextmanager
def blocking(op: str, group: str, waits_for: tuple[int, ...] | list[int]):
    """Marks a call that may block until peers arrive (see the module docstring)."""
    b = Blocked(op=op, group=group, waits_for=tuple(waits_for), since=time.monotonic())
    with _LOCK:
        _NOW.append(b)
    try:
        yield b
    finally:
        with _LOCK:
            _NOW.remove(b)


def describe_group(name: str, members: tuple[int, ...] | list[int]) -> str:
    return f"group {name} (ranks {ranks_text(members)})"


def ranks_text(ranks: tuple[int, ...] | list[int]) -> str:
    """'0-3', '0, 2, 5-7': runs of consecutive ranks."""
    out: list[str] = []
    rs = sorted(set(ranks))
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(f"{rs[i]}-{rs[j]}" if j > i + 1 else ", ".join(map(str, rs[i : j + 1])))
        i = j + 1
    return ", ".join(out) if out else "none"


def line(b: Blocked, now: float) -> str:
    who = f"for ranks {ranks_text(b.waits_for)}" if len(b.waits_for) != 1 else f"for rank {b.waits_for[0]}"
    on = f" on {b.group}" if b.group else ""
    return f"rank {_RANK[0]} waits in {b.op}{on} {who} ({now - b.since:.0f} s so far)"


def _watch() -> None:
    while True:
        time.sleep(1.0)
        now = time.monotonic()
        with _LOCK:
            due = [b for b in _NOW if not b.said and now - b.since >= NOTICE_AFTER]
            for b in due:
                b.said = True
        for b in due:
            say(line(b, now))


def say(text: str) -> None:
    """One line into the rank's log and onto the terminal it was started from."""
    data = (text + "\n").encode()
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.flush()
        os.write(2, data)
    fd = TERMINAL[0]
    if fd is not None:
        with contextlib.suppress(OSError):
            os.write(fd, data)
