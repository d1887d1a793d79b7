"""A timed-out rank's Python stack, from the dump faulthandler wrote into its log before the kill
(executors/local.py: STACK_SIGNAL), for the trace header's `rank_status` (docs/trace-format.md):
`analyzer hang` then says where a rank nobody's op explains was when it was stopped.

faulthandler writes every thread, innermost frame first:

    Current thread 0x00007f3a (most recent call first):
      File "/work/train.py", line 12 in <module>
      File "<frozen runpy>", line 88 in _run_code

The main thread is the one whose outermost frame is not threading's (every other thread starts
in `threading.Thread._bootstrap`). A log may hold several dumps: the last main thread is the one.
"""

from __future__ import annotations

import os
import re

from tracer.capture.code_paths import is_user_path

_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(?P<path>.*)", line (?P<line>\d+) in (?P<name>.*?)\s*$')
MAX_FRAMES = 40
"""Frames kept per stack (innermost first): where it waits, and enough of how it got there."""


def main_thread_stack(log_text: str) -> list[tuple[str, int, str]]:
    """[(path, line, function)] of the last main-thread stack dumped in a log, innermost first."""
    threads: list[list[tuple[str, int, str]]] = []
    current: list[tuple[str, int, str]] | None = None
    for line in log_text.splitlines():
        if _THREAD.match(line):
            current = []
            threads.append(current)
            continue
        m = _FRAME.match(line) if current is not None else None
        if m is not None and current is not None:
            current.append((m["path"], int(m["line"]), m["name"]))
        elif current is not None and line.strip() and not line.startswith("  <"):
            current = None  # the dump ended ("  <no Python frame>" and "  ..." stay in it)
    main = [t for t in threads if t and not t[-1][0].endswith(os.sep + "threading.py")]
    return main[-1] if main else []


def stack_of_log(path: str, root: str) -> tuple[list[str], str]:
    """(the stack as 'path:line in function' lines, innermost first; the innermost frame of the
    program's own code, '' if none) from the log at `path`; paths relative to `root`."""
    try:
        with open(path, errors="replace") as f:
            text = f.read()
    except OSError:
        return [], ""
    frames = main_thread_stack(text)[:MAX_FRAMES]
    lines = [f"{_rel(p, root)}:{n} in {name}" for p, n, name in frames]
    at = next(
        (line for (p, _, _), line in zip(frames, lines, strict=True) if not p.startswith("<") and is_user_path(p)), ""
    )
    return lines, at


def _rel(path: str, root: str) -> str:
    try:
        r = os.path.relpath(path, root)
    except ValueError:
        return path
    return path if r.startswith(".." + os.sep + "..") else r
