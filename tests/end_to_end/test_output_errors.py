"""Every analyzer command that writes a file: an output it cannot write (a folder it cannot create
files in, no space, a folder given as the file) is one line naming the path, exit 2, and the old
file stays; a reader that goes away (`| head -1`) leaves the command's own exit status, quietly."""

import contextlib
import errno
import os
import subprocess

import pytest
from conftest import BIN, REPO
from typer.testing import CliRunner

from analyzer.cli import app

FSDP = os.path.join(REPO, "traces", "fsdp.trace")
LLAMA_A = os.path.join(REPO, "traces", "llama3_debug_fsdp_tp.trace")
LLAMA_B = os.path.join(REPO, "traces", "torchtitan_llama3_fsdp_tp.trace")


def analyzer(*args, **kw):
    return subprocess.run([os.path.join(BIN, "analyzer"), *args], capture_output=True, text=True, **kw)


def one_line(p, path: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0].startswith("error:") and path in lines[0], lines[0]
    return lines[0]


WRITERS = [
    ("report", FSDP, "-o", "{out}.html"),
    ("export", FSDP, "-o", "{out}.json"),
    ("export", FSDP, "--format", "json", "-o", "{out}.json"),
    ("export", FSDP, "--format", "parquet", "-o", "{out}.parquet"),
    ("hang", FSDP, "--dot", "{out}.dot"),
]


@pytest.mark.parametrize("args", WRITERS, ids=["report", "perfetto", "json", "parquet", "dot"])
def test_an_output_in_proc_is_one_line_exit_2(args):
    # /proc takes no new files, whoever runs it (root passes access() there: the write is tried)
    args = [a.format(out="/proc/commtrace-out") for a in args]
    one_line(analyzer(*args), "/proc/commtrace-out")


@pytest.mark.parametrize("args", WRITERS[:4], ids=["report", "perfetto", "json", "parquet"])
def test_a_folder_given_as_the_output_is_one_line(args, tmp_path):
    args = [str(tmp_path) if "{out}" in a else a for a in args]
    one_line(analyzer(*args), str(tmp_path))


@pytest.mark.parametrize("args", WRITERS[:3] + WRITERS[4:], ids=["report", "perfetto", "json", "dot"])
def test_no_space_is_one_line_and_the_old_file_stays(args, tmp_path, monkeypatch):
    from traceformat import output

    real = output.atomic_open

    class Full:
        def __init__(self, f):
            self._f = f

        def write(self, *_):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        def __getattr__(self, name):
            return getattr(self._f, name)

    @contextlib.contextmanager
    def full(path, mode="w"):
        with real(path, mode) as f:
            yield Full(f)

    monkeypatch.setattr(output, "atomic_open", full)
    out = str(tmp_path / "out")
    args = [a.format(out=out) for a in args]
    target = next(a for a in args if a.startswith(out))
    with open(target, "w") as f:
        f.write("the previous output")
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = r.stderr.strip().splitlines()
    assert lines == [f"error: {args[args.index(target) - 1]} {target}: cannot write (no space left on device)"]
    assert open(target).read() == "the previous output"
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(target)]  # no temp file left behind


def _closed_pipe(*args, cwd=None) -> subprocess.CompletedProcess:
    """Run `analyzer ARGS` with its stdout a pipe whose reader is gone before it writes a byte
    (the end state of `| head -1` on long output, without the race)."""
    r, w = os.pipe()
    os.close(r)
    try:
        p = subprocess.run(
            [os.path.join(BIN, "analyzer"), *args],
            stdout=w,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=dict(os.environ, COLUMNS="80"),
        )
    finally:
        os.close(w)
    return p


@pytest.fixture(scope="module")
def truncated(tmp_path_factory):
    """A golden cut at 3/4 of its size: some streams end early, so `check` has findings."""
    path = tmp_path_factory.mktemp("cut") / "cut.trace"
    data = open(FSDP, "rb").read()
    path.write_bytes(data[: len(data) * 3 // 4])
    return str(path)


@pytest.mark.parametrize(
    "args,status",
    [
        (["diff", FSDP, FSDP], 0),
        (["diff", LLAMA_A, LLAMA_B], 1),
        (["diff", LLAMA_A, LLAMA_B, "--json"], 1),
        (["check", FSDP], 0),
        (["check", "TRUNCATED"], 1),
        (["check", "TRUNCATED", "--json"], 1),
        (["hang", FSDP], 0),
        (["summary", FSDP], 0),
        (["summary", FSDP, "--json"], 0),
    ],
)
def test_broken_pipe_exits_quietly_with_the_real_status(args, status, truncated):
    args = [truncated if a == "TRUNCATED" else a for a in args]
    p = _closed_pipe(*args)
    assert (p.returncode, p.stderr) == (status, "")
