"""Writing outputs safely, for every command that writes a file (`tracer record / merge / replay
-o`, `analyzer export / report -o`, `analyzer hang --dot`, golden updates).

Two rules: an output is never one of the command's inputs (or the script it runs): refused
before anything is read or run, the file untouched. And an output is written to a temporary
file in the same folder and renamed into place (`os.replace`, atomic on POSIX), so a failed or
interrupted command never leaves a half-written file where a good one was. Torch-free.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Iterator


class OutputError(ValueError):
    """The output path cannot be used (one-line message)."""


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
    if not os.access(folder, os.W_OK) or (os.path.exists(out) and not os.access(out, os.W_OK)):
        raise OutputError(f"{what} {out}: cannot write (permission denied)")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(out: str | os.PathLike) -> Iterator[str]:
    """A temporary path next to `out` to write; renamed onto `out` when the block ends without
    an exception, removed otherwise (KeyboardInterrupt included). The file gets the permissions
    a plain open() would give it."""
    out = os.fspath(out)
    folder = os.path.dirname(os.path.abspath(out))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(out)}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        yield tmp
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
