"""In-process timers around every entry point of the recorder (bench only), for the overhead row's
cross-check: the time recording spends in its own code, measured inside the recorded run itself.

Each entry point adds its wall time to one total, outermost call only (an event written from a
hook is not counted twice). What they cover: setting up and tearing down a recording (the
recorder and its part file, installing and removing every patch, the fake-mode channel), each
recorded call (attribution and its stack walk, sequence numbers, atom interning, building the
row, msgpack and the part-file write), the attribution hooks torch calls (module forward pre /
post, the backward prehooks, the optimizer hooks) and DeviceMesh / group bookkeeping. What they
cannot see: torch's side of calling a hook (the autograd engine entering Python for a prehook)
and the small wrapper frames patched around torch functions; those show only in the A/B figure.
"""

from __future__ import annotations

import functools
import time

TOTAL_NS = [0]
_depth = [0]


def _timed(fn):
    @functools.wraps(fn)
    def timed(*args, **kwargs):
        if _depth[0]:
            return fn(*args, **kwargs)
        _depth[0] = 1
        t0 = time.perf_counter_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            TOTAL_NS[0] += time.perf_counter_ns() - t0
            _depth[0] = 0

    return timed


_ORIGINALS: list[tuple[object, str, object]] = []


def install() -> None:
    """Wrap the entry points (between recordings: the hooks of a running one hold bound methods)."""
    from tracer.capture import attribution, ddp, patches, recorder
    from tracer.fake import channel, object_collectives

    entry_points = {
        recorder.Recorder: ("__init__", "record", "waited", "event", "note_group", "where", "group_ref", "close"),
        attribution.Attribution: (
            "install",
            "uninstall",
            "_fw_pre",
            "_fw_post",
            "_entered_backward",
            "_opt_pre",
            "_opt_post",
        ),
        patches: ("install", "_mesh_info"),
        patches.Patcher: ("undo",),
        ddp: ("install",),
        object_collectives: ("install",),
        channel.Channel: ("__init__", "finished"),
    }
    for owner, names in entry_points.items():
        for name in names:
            _ORIGINALS.append((owner, name, getattr(owner, name)))
            setattr(owner, name, _timed(getattr(owner, name)))


def uninstall() -> None:
    """Put the entry points back: the A/B runs are timed without the timers' own cost."""
    for owner, name, orig in reversed(_ORIGINALS):
        setattr(owner, name, orig)
    _ORIGINALS.clear()


def seconds() -> float:
    return TOTAL_NS[0] / 1e9
