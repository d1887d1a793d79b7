"""Writing outputs safely, for every command that writes a file (`tracer record / merge / replay
-o`, `analyzer export / report -o`, `analyzer hang --dot`, golden updates).

Two rules: an output is never one of the command's inputs (or the script it runs): refused
before anything is read or run, the file untouched. And an output is written to a temporary
file in the same folder and renamed into place (`os.replace`, atomic on POSIX), so a failed or
interrupted command never leaves a half-written file where a good one was. An output that
exists and is not a regular file (/dev/null, /dev/full, a FIFO, a socket) is never renamed over:
it is written in place once the temporary file is complete. An OSError on an output is one line
naming it (cannot_write); QuietPipe lets a command whose reader went away (`| head`) exit with
its own status. Torch-free.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator


class OutputError(ValueError):
    """The output path cannot be used (one-line message)."""


def cannot_write(out: str | os.PathLike, e: OSError, what: str = "-o") -> OutputError:
    """The one line for an OSError on `out`: the system's reason (no space, read-only, ...)."""
    why = (e.strerror or type(e).__name__).lower()
    return OutputError(f"{what} {os.fspath(out)}: cannot write ({why})")


def special(out: str | os.PathLike) -> bool:
    """Whether `out` exists and is neither a regular file nor a folder (a character device such as
    /dev/null, a FIFO, a socket): written in place, never renamed over (as root a rename would
    replace the device node with a regular file)."""
    try:
        mode = os.stat(out).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def parts_folder(out: str | os.PathLike) -> str:
    """Where a recording into `out` streams its per-rank parts: OUT.parts beside it, or a folder
    in the temp dir for a special output (-o /dev/null: nothing is created in /dev)."""
    out = os.fspath(out)
    if special(out):
        return os.path.join(tempfile.gettempdir(), f"commtrace-{os.getpid()}-{os.path.basename(out)}.parts")
    return out + ".parts"


def _same(a: str, b: str) -> bool:
    """Same file: the same inode where both exist (hard links, symlinks), else the same path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _inside(path: str, folder: str) -> bool:
    folder = os.path.realpath(folder)
    return os.path.commonpath([os.path.realpath(path), folder]) == folder


def refuse_inputs(out: str | os.PathLike, inputs: Iterable[str | os.PathLike | None], what: str = "-o") -> None:
    """OutputError when `out` is one of `inputs` (a file, or a folder it would be written into,
    or a file inside an input folder), or is a folder itself."""
    out = os.fspath(out)
    for given in inputs:
        if given is None:
            continue
        given = os.fspath(given)
        if not os.path.exists(given):
            continue
        if _same(out, given) or (os.path.isdir(given) and _inside(out, given)):
            raise OutputError(
                f"{what} {out} is also an input ({given}); it would be overwritten: give another output path"
            )
    if os.path.isdir(out):
        raise OutputError(f"{what} {out}: is a folder (give a file name)")


def writable(out: str | os.PathLike, what: str = "-o") -> None:
    """OutputError when `out` cannot be written (checked before a long load or run)."""
    out = os.fspath(out)
    folder = os.path.dirname(os.path.abspath(out))
    if os.path.isdir(out):
        raise OutputError(f"{what} {out}: is a folder (give a file name)")
    if not os.path.isdir(folder):
        raise OutputError(f"{what} {out}: cannot write (no folder {folder})")
    if special(out):  # written in place: only the file itself needs to be writable
        if not os.access(out, os.W_OK):
            raise OutputError(f"{what} {out}: cannot write (permission denied)")
        return
    if not os.access(folder, os.W_OK) or (os.path.exists(out) and not os.access(out, os.W_OK)):
        raise OutputError(f"{what} {out}: cannot write (permission denied)")


def probe(out: str | os.PathLike, what: str = "-o") -> None:
    """writable(), then a real try: /proc, /sys and some mounts pass access() (as root) yet refuse
    new files. OutputError, one line, before a long load or run."""
    out = os.fspath(out)
    writable(out, what)
    if special(out):
        return
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(out)}.", suffix=".tmp", dir=_folder(out))
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise cannot_write(out, e, what) from None


def _folder(out: str) -> str:
    return os.path.dirname(os.path.abspath(out))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(out: str | os.PathLike) -> Iterator[str]:
    """A temporary path next to `out` to write; renamed onto `out` when the block ends without
    an exception, removed otherwise (KeyboardInterrupt included). The file gets the permissions
    a plain open() would give it. A special `out` (a device, a FIFO: see special()) is not renamed
    over: the temporary file (in the temp dir) is copied into it, then removed."""
    out = os.fspath(out)
    in_place = special(out)
    folder = tempfile.gettempdir() if in_place else _folder(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(out)}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        yield tmp
        if in_place:
            with open(tmp, "rb") as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.unlink(tmp)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
            os.replace(tmp, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_open(out: str | os.PathLike, mode: str = "w"):
    """open() of a temporary file that replaces `out` once closed without an exception."""
    with atomic_path(out) as tmp:
        with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as f:
            yield f


class QuietPipe:
    """sys.stdout that, once its reader has gone (`analyzer diff A B | head -1`), sends the rest
    to devnull: the command goes on to exit with its own status (1 different, 0 equal), with no
    traceback and no "Exception ignored" at exit (click would exit 1 on the broken pipe)."""

    def __init__(self, stream):
        self._stream = stream

    def _gone(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self._stream.fileno())  # what is still buffered goes there too
        os.close(devnull)

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)
