"""A real channel between the rank processes of one fake-mode recording.

Tensor collectives and p2p in fake mode deliver mirrored data (process_group.py): nothing
crosses between ranks. That is wrong where a program's control flow depends on what a peer
sent: object collectives (a broadcast config or seed, pipelining's shape metadata) and
pipelining's static-shape vote. While such a call runs (`carrying()`), the recording process
group really exchanges the tensors it is given through this channel, so the receiving rank
computes on what the sender sent; every call is still recorded exactly as torch issued it.

The channel is a folder of message files in the recording's parts folder (shared storage is
all it needs: the local executor, Ray on a shared filesystem). A message is written to a
temporary name and renamed, so a reader never sees half of one. Keys are deterministic
(group, sender, receiver, per-pair count), and messages are never consumed: a rank recorded
again (fake compute falling back to real) reads the same messages and rewrites its own
identically. `tracer record` removes the folder afterwards.

A rank waiting for a message marks itself blocked (`blocked/RANK`), so the executor may start
more ranks than it has cores (a pipeline's last stage waits on the first); it fails in one line
naming both ranks when the sender finished without sending (`done/RANK`) or after `timeout`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

from tracer.capture import watchdog

_tls = threading.local()
NEEDS_REAL = "needs real compute"
"""The `done` marker of a rank that stopped to be recorded again with real compute."""
GONE = "gone"
"""The `done` marker the executor leaves for a rank whose process ended without one (`gone`)."""


class ChannelError(RuntimeError):
    """A message that will not come (one-line message naming both ranks)."""


class PeerRecordedAgain(ChannelError):
    """The sender stopped for a re-run with real compute: this rank is re-run with it."""


def channel_dir(parts_dir: str) -> str:
    return os.path.join(parts_dir, "channel")


@contextlib.contextmanager
def carry(label: str):
    """Tensors exchanged inside travel for real (see the module docstring); `label` names the
    call in errors (e.g. "recv_object_list")."""
    depth = getattr(_tls, "carry", 0)
    outer = getattr(_tls, "label", "")
    _tls.carry = depth + 1
    _tls.label = outer or label
    try:
        yield
    finally:
        _tls.carry, _tls.label = depth, outer


def label() -> str:
    """The outermost carried call running now."""
    return getattr(_tls, "label", "") or "a message"


def carrying() -> bool:
    return getattr(_tls, "carry", 0) > 0 and Channel.current is not None


class Channel:
    """This rank's end of the channel."""

    current: Channel | None = None  # set by run_job in fake mode

    def __init__(self, folder: str, rank: int, timeout: float | None = None):
        self.folder = folder
        self.rank = rank
        self.timeout = timeout
        for sub in ("msg", "blocked", "done"):
            os.makedirs(os.path.join(folder, sub), exist_ok=True)
        self._counts: dict[tuple, int] = {}

    def next_id(self, key: tuple) -> int:
        """The per-key count of messages (both ends count the same calls)."""
        n = self._counts.get(key, 0)
        self._counts[key] = n + 1
        return n

    def _path(self, name: str) -> str:
        return os.path.join(self.folder, "msg", name)

    def post(self, name: str, data: bytes) -> None:
        path = self._path(name)
        tmp = f"{path}.tmp{self.rank}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def take(self, name: str, sender: int, what: str) -> bytes:
        """The message `name` from global rank `sender`, waiting for it (see module docstring)."""
        data = self._take(name, sender, what, or_none=False)
        assert data is not None  # (raises instead)
        return data

    def take_or_none(self, name: str, sender: int, what: str) -> bytes | None:
        """As take, but None where the message will never come (the sender finished without
        sending it) or where waiting for it would deadlock (a cycle of waiting ranks, see
        `_in_cycle`): a value read back (values.py) falls back to the mirrored one there."""
        return self._take(name, sender, what, or_none=True)

    def _take(self, name: str, sender: int, what: str, *, or_none: bool) -> bytes | None:
        path = self._path(name)
        if os.path.exists(path):
            return _read(path)
        marker = os.path.join(self.folder, "blocked", str(self.rank))
        with open(marker, "w") as f:
            f.write(f"{sender}\n{name}")
        start = time.monotonic()
        delay = 0.0005
        cycles = 0
        try:
            with watchdog.blocking(what, "", (sender,)):  # `what` names its group
                while not os.path.exists(path):
                    waited = time.monotonic() - start
                    done = os.path.join(self.folder, "done", str(sender))
                    if os.path.exists(done) and not os.path.exists(path):
                        status = _read(done).decode()
                        if status == NEEDS_REAL:
                            raise PeerRecordedAgain(f"rank {sender} is recorded again with real compute")
                        if or_none:
                            return None
                        how = "died or was killed" if status == GONE else "finished"
                        raise ChannelError(
                            f"rank {self.rank} waits for {what} from rank {sender}, which {how} without sending it"
                        )
                    if self.timeout and waited > self.timeout:
                        raise ChannelError(
                            f"rank {self.rank} waited {self.timeout:g} s for {what} from rank {sender}, "
                            f"which never sent it (--timeout)"
                        )
                    if or_none and delay >= 0.05:
                        cycles = cycles + 1 if self._in_cycle(sender) else 0
                        if cycles >= 3:  # seen on three polls: not a marker caught mid-update
                            return None
                    time.sleep(delay)
                    delay = min(delay * 2, 0.05)
        finally:
            with contextlib.suppress(OSError):
                os.remove(marker)
        return _read(path)

    def _in_cycle(self, sender: int) -> bool:
        """Whether `sender` waits, through a chain of waiting ranks, for this one. Each rank
        posts its own contributions before it waits, so a rank in the chain whose awaited
        message is not there yet can only go on once this rank does: waiting would deadlock
        (a program that enters two groups in opposite orders; the trace shows it)."""
        waits = _waits(self.folder)
        seen: set[int] = set()
        r = sender
        while r in waits and r not in seen:
            seen.add(r)
            nxt, name = waits[r]
            if os.path.exists(self._path(name)):
                return False  # r is about to go on
            if nxt == self.rank:
                return True
            r = nxt
        return False

    def finished(self, status: str = "") -> None:
        """This rank will send nothing more: peers waiting on it fail at once."""
        with open(os.path.join(self.folder, "done", str(self.rank)), "w") as f:
            f.write(status)


def gone(folder: str, ranks: list[int]) -> None:
    """The executor's word for ranks whose process ended without saying `finished` (a segfault,
    a kill, a timeout): peers waiting on them stop waiting (a value falls back to the mirrored
    one, an object fails naming them) instead of waiting for ever."""
    for r in ranks:
        with contextlib.suppress(OSError):
            fd = os.open(os.path.join(folder, "done", str(r)), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, GONE.encode())
            os.close(fd)


def forget_done(folder: str, ranks: list[int]) -> None:
    """Ranks about to be recorded again will send again."""
    for r in ranks:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(folder, "done", str(r)))


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def blocked_ranks(folder: str) -> dict[int, int]:
    """{rank: the rank it waits for} for the ranks waiting in `take` right now (for the executor)."""
    out: dict[int, int] = {}
    try:
        names = [n for n in os.listdir(os.path.join(folder, "blocked")) if n.isdigit()]
    except OSError:
        return out
    for n in names:
        try:
            out[int(n)] = int(_read(os.path.join(folder, "blocked", n)).split(b"\n", 1)[0] or -1)
        except (OSError, ValueError):
            out[int(n)] = -1  # (just removed, or not yet written)
    return out


def _waits(folder: str) -> dict[int, tuple[int, str]]:
    """{rank: (the rank it waits for, the message it waits for)} of the ranks waiting now."""
    out: dict[int, tuple[int, str]] = {}
    try:
        names = [n for n in os.listdir(os.path.join(folder, "blocked")) if n.isdigit()]
    except OSError:
        return out
    for n in names:
        try:
            sender, name = _read(os.path.join(folder, "blocked", n)).decode().split("\n", 1)
            out[int(n)] = (int(sender), name)
        except (OSError, ValueError):
            continue  # just removed, or not yet written
    return out
