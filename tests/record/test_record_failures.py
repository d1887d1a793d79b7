"""Nothing lost on a failed recording, and the reason said at once (issue 26, recorder side).

A recording where ranks failed never replaces a trace already at -o: the old file's bytes stay,
the partial trace goes beside it (x.trace -> x.failed.trace); with nothing there yet it goes to
the asked path. The verdict (first real error, the ranks that share it) comes before the
summary line, and a rank that exits with a status says what it printed last (argparse's
message). Every OSError on a tracer output is one line naming it, exit 2; a device or FIFO
output is written in place, never renamed over; a reader that goes away leaves the status."""

import contextlib
import errno
import json
import os
import re
import shutil
import stat
import subprocess
import threading

import pytest
from conftest import BIN, REPO, program

from analyzer.loader import load
from traceformat import output

GOLDEN = os.path.join(REPO, "traces", "fsdp.trace")


def run(*args, cwd=None, stdout=subprocess.PIPE):
    return subprocess.run(
        [os.path.join(BIN, args[0]), *map(str, args[1:])],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def lines(p) -> list[str]:
    assert "Traceback" not in p.stderr, p.stderr
    return [re.sub(r" in \d+\.\d s ", " in T s ", line) for line in p.stderr.strip().splitlines()]


def test_a_failed_recording_keeps_the_trace_that_was_there(tmp_path):
    shutil.copy(GOLDEN, tmp_path / "x.trace")
    before = (tmp_path / "x.trace").read_bytes()
    p = run(
        "tracer", "record", "--script", program("pipeline"), "-n", "4", "-o", "x.trace", "--", "--bogus", cwd=tmp_path
    )
    assert p.returncode == 2
    assert (tmp_path / "x.trace").read_bytes() == before  # byte for byte
    said = [line for line in lines(p) if not line.startswith("peak memory")]
    assert said == [
        "error: ranks 0-3: the program exited with status 2: pipeline.py: error: unrecognized arguments: --bogus "
        "(logs: x.trace.parts/job_00000.log and 3 more)",
        "partial trace: 0 events on 4 ranks in T s -> x.failed.trace (x.trace left as it was)",
    ]
    assert load(tmp_path / "x.failed.trace").n_events == 0  # the partial result, where it says
    assert "unrecognized arguments: --bogus" in (tmp_path / "x.trace.parts" / "job_00002.log").read_text()


def test_partial_trace_goes_to_the_path_when_nothing_is_there_else_beside_it(tmp_path):
    shutil.copy(program("raises"), tmp_path / "raises.py")
    for attempt in (1, 2):
        p = run("tracer", "record", "--script", "raises.py", "-n", "4", "-o", "r.trace", cwd=tmp_path)
        assert p.returncode == 2
        said = lines(p)
        assert said[0] == (
            "error: rank 2: ValueError: bad batch on rank 2 (raises.py:8 in <module>) "
            "(log: r.trace.parts/job_00002.log)"
        )
        if attempt == 1:  # nothing was there: nothing to lose
            assert said[1] == "partial trace: 11 events on 4 ranks in T s -> r.trace"
            assert not (tmp_path / "r.failed.trace").exists()
            first = (tmp_path / "r.trace").read_bytes()
        else:  # the first attempt's trace is there now, and stays
            assert said[1] == "partial trace: 11 events on 4 ranks in T s -> r.failed.trace (r.trace left as it was)"
            assert (tmp_path / "r.trace").read_bytes() == first
    p = run("analyzer", "check", tmp_path / "r.failed.trace", "--json")
    assert p.returncode == 1
    found = json.loads(p.stdout)["findings"]
    assert ("failed_rank", [2]) in [(f["kind"], f["culprit_ranks"]) for f in found]


def test_the_first_real_error_is_shown_not_the_rank_waiting_on_it(tmp_path):
    # rank 1 raises before it sends; rank 0, waiting for its object, fails because of it
    (tmp_path / "job.py").write_text(
        "import torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "if dist.get_rank() == 1:\n"
        "    raise RuntimeError('no data on rank 1')\n"
        "box = [None]\n"
        "dist.broadcast_object_list(box, src=1)\n"
    )
    p = run("tracer", "record", "--script", "job.py", "-n", "3", "-o", "j.trace", cwd=tmp_path)
    assert p.returncode == 2
    said = lines(p)
    assert said[:2] == [
        "error: rank 1: RuntimeError: no data on rank 1 (job.py:4 in <module>) (log: j.trace.parts/job_00001.log)",
        "error: 2 more ranks failed: 0,2 (waiting for a rank that stopped)",
    ]
    assert said[2].startswith("partial trace: ")


def _failure(rank, why, ended=1.0):
    from tracer.record.result import RankFailure

    return RankFailure(rank=rank, why=why, log=f"p/job_{rank:05d}.log", ended=ended)


def test_failure_lines_group_the_shared_reason_and_prefer_the_earliest_cause():
    from tracer.record.result import failed_path, failure_lines

    waits = "ChannelError: rank 0 waits for recv_object_list from rank 3, which finished without sending it"
    failures = {
        0: _failure(0, waits, ended=1.0),
        1: _failure(1, "the program exited with status 3", ended=5.0),
        2: _failure(2, "ValueError: late (a.py:3)", ended=9.0),
        3: _failure(3, "the program exited with status 3", ended=2.0),
    }
    assert failure_lines(failures) == [
        "ranks 1,3: the program exited with status 3 (logs: p/job_00001.log and 1 more)",
        "2 more ranks failed: 0,2 (other reasons: see their logs)",
    ]
    assert failure_lines({0: failures[0]}) == [f"rank 0: {waits} (log: p/job_00000.log)"]
    assert failure_lines({}) == []
    assert failed_path("out/x.trace") == "out/x.failed.trace" and failed_path("x") == "x.failed"


def test_exit_status_comes_with_the_last_stderr_line():
    import io

    from tracer.modes.run import LastLine, exit_line

    said = LastLine(io.StringIO())
    said.write("usage: train.py [-h]\ntrain.py: error: unrecognized ")
    said.write("arguments: --bogus\n\n")
    assert said.stream.getvalue().endswith("--bogus\n\n")  # everything still reaches the log
    assert (
        exit_line(2, said.line())
        == "the program exited with status 2: train.py: error: unrecognized arguments: --bogus"
    )
    assert exit_line(3, "") == "the program exited with status 3"
    assert (
        exit_line("bad config: no [model]", "older line") == "the program exited with status 1: bad config: no [model]"
    )


@pytest.mark.parametrize(
    "args",
    [
        ["record", "--script", program("collectives"), "-n", "2", "-o", "/proc/commtrace-x.trace"],
        ["merge", GOLDEN, "-o", "/proc/commtrace-x.trace"],
        ["replay", GOLDEN, "-o", "/proc/commtrace-x.trace"],
    ],
    ids=["record", "merge", "replay"],
)
def test_an_output_in_proc_is_one_line_exit_2(args):
    # /proc takes no new files, whoever runs it (root passes access() there: the write is tried)
    p = run("tracer", *args)
    assert p.returncode == 2
    assert lines(p) == ["error: -o /proc/commtrace-x.trace: cannot write (no such file or directory)"]


def test_a_golden_that_cannot_be_written_is_one_line(tmp_path):
    shutil.copy(GOLDEN, tmp_path / "fsdp.trace")
    traces = "/proc/commtrace-goldens"
    p = run(
        "tracer",
        "golden",
        "update",
        "fsdp.trace",
        "--examples",
        os.path.join(REPO, "examples"),
        "--traces",
        traces,
        cwd=tmp_path,
    )
    assert p.returncode == 2
    assert lines(p) == [f"error: golden {traces}/fsdp.trace: cannot write (no such file or directory)"]


def test_no_space_while_merging_is_one_line_and_the_old_file_stays(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from traceformat import parts
    from tracer.cli import app

    real = output.atomic_path

    @contextlib.contextmanager
    def full(path):
        with real(path) as tmp:
            yield tmp
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(parts, "atomic_path", full)
    out = tmp_path / "m.trace"
    out.write_bytes(b"the previous output")
    r = CliRunner().invoke(app, ["merge", GOLDEN, "-o", str(out)])
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.stderr.strip().splitlines() == [f"error: -o {out}: cannot write (no space left on device)"]
    assert out.read_bytes() == b"the previous output" and os.listdir(tmp_path) == ["m.trace"]


def test_a_fifo_output_is_written_into_never_renamed_over(tmp_path):
    ref = tmp_path / "ref.trace"
    assert run("tracer", "merge", GOLDEN, "-o", ref).returncode == 0
    fifo = tmp_path / "out.trace"
    os.mkfifo(fifo)
    got = bytearray()

    def read():
        with open(fifo, "rb") as f:
            got.extend(f.read())

    reader = threading.Thread(target=read, daemon=True)  # a FIFO renamed over: nobody ever writes to it
    reader.start()
    p = run("tracer", "merge", GOLDEN, "-o", fifo)
    reader.join(timeout=60)
    assert p.returncode == 0, p.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still the FIFO: not replaced by a regular file
    assert bytes(got) == ref.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["out.trace", "ref.trace"]  # no temp file left beside it


def test_devices_and_fifos_are_special_regular_files_are_not(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "file").write_text("x")
    assert output.special("/dev/null") and output.special(tmp_path / "fifo")
    assert (
        not output.special(tmp_path / "file") and not output.special(tmp_path) and not output.special(tmp_path / "no")
    )
    assert output.parts_folder(tmp_path / "x.trace") == f"{tmp_path}/x.trace.parts"
    assert not output.parts_folder("/dev/null").startswith("/dev/")  # nothing is created in /dev
    output.probe("/dev/null")  # written in place: its folder need not take new files
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_reader_that_goes_away_leaves_the_real_status(tmp_path):
    r, w = os.pipe()
    os.close(r)
    try:
        p = run(
            "tracer",
            "golden",
            "update",
            GOLDEN,
            "--examples",
            os.path.join(REPO, "examples"),
            "--traces",
            tmp_path,
            stdout=w,
        )
    finally:
        os.close(w)
    assert (p.returncode, p.stderr) == (0, "")
    assert os.path.exists(tmp_path / "fsdp.trace")  # the work was done; only its report was lost


def test_a_peer_caused_error_reraised_by_the_program_is_still_the_peers():
    """torch's pipelining re-raises a stage's failure as its own RuntimeError ("... failed"):
    the ChannelError inside is what the rank's line says, so the verdict shows the peer's cause."""
    from types import SimpleNamespace

    from tracer.fake.channel import ChannelError
    from tracer.modes.run import one_line_error
    from tracer.record.result import RankFailure, failure_lines

    rec = SimpleNamespace(attribution=SimpleNamespace(_describe=lambda code: None))
    try:
        try:
            raise ChannelError("rank 0 waits for recv_object_list from rank 4, which finished without sending it")
        except ChannelError as inner:
            raise RuntimeError("Stage 0 failed to run backward") from inner
    except RuntimeError as e:
        line = one_line_error(e, rec)
    assert line.startswith("ChannelError: rank 0 waits for recv_object_list from rank 4")
    failures = {
        0: RankFailure(rank=0, why=line, log="r0.log", ended=1.0),
        4: RankFailure(rank=4, why="IndexError: list index out of range", log="r4.log", ended=2.0),
    }
    assert failure_lines(failures)[0].startswith("rank 4: IndexError")
