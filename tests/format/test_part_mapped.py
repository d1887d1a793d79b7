"""Memory-mapped part files: a SIGKILLed writer keeps every record it copied; a zero-padded or
half-copied tail reads like a truncated one; a closed part has no padding."""

import os
import signal
import subprocess
import sys
import textwrap

from traceformat import format as fmt
from traceformat import reader as trace_reader
from traceformat.writer import TraceWriter

WRITER = textwrap.dedent(
    """
    import sys, time
    from traceformat import format as fmt
    from traceformat.writer import TraceWriter
    TraceWriter.FIRST_WINDOW = TraceWriter.MAP_WINDOW = 4096  # many windows: records cross their boundaries
    w = TraceWriter(sys.argv[1], fmt.make_header(world_size=2, ranks=[0], mode="fake"), mapped=True)
    w.group(0, "default_pg", [0, 1], "world")
    for i in range(int(sys.argv[2])):
        w.row(0, fmt.default_row(op=w.atom("all_reduce"), group=0, seq=i, frame=w.atom(f"train.py:{i % 7}")))
    print("written", flush=True)
    time.sleep(60)
    """
)


def _seqs(trace):
    return list(trace.columns[0]["seq"])


def test_sigkilled_mapped_writer_keeps_every_event(tmp_path):
    path = tmp_path / "rank_0.part"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), *sys.path]))
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), "3000"], stdout=subprocess.PIPE, env=env)
    try:
        assert proc.stdout.readline().strip() == b"written"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert os.path.getsize(path) % 4096 == 0  # never closed: the window's zero padding is still there
    t = trace_reader.read_trace(path)
    assert _seqs(t) == list(range(3000))
    assert [t.atoms[a] for a in t.columns[0]["frame"][:8]] == [f"train.py:{i % 7}" for i in range(8)]
    assert not t.complete and t.truncated_at is not None and t.truncated_at < os.path.getsize(path)


def _written(tmp_path, n):
    path = tmp_path / "p.part"
    w = TraceWriter(path, fmt.make_header(world_size=1, ranks=[0], mode="fake"), mapped=True)
    w.group(0, "default_pg", [0], "world")
    for i in range(n):
        w.row(0, fmt.default_row(op=w.atom("send"), group=0, seq=i))
    return path, w


def test_closed_mapped_part_has_no_padding(tmp_path):
    path, w = _written(tmp_path, 10)
    w.end(0, 10)
    w.footer()
    w.close()
    t = trace_reader.read_trace(path)
    assert t.complete and t.truncated_at is None and _seqs(t) == list(range(10))
    assert open(path, "rb").read()[-1] != 0


def test_half_copied_record_is_not_read(tmp_path):
    """Killed inside a copy: the record's first byte (stored last) is still zero, its body is not;
    the reader stops there instead of decoding a row whose tail is padding."""
    path, w = _written(tmp_path, 5)
    end = w._pos
    w.row(0, fmt.default_row(op=w.atom("send"), group=0, seq=5))
    w._map[end - w._base] = 0  # as if the kill came before the commit byte
    t = trace_reader.read_trace(path)
    assert _seqs(t) == list(range(5)) and t.truncated_at == end
