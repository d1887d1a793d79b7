"""Column codecs of format v2: every packing round-trips, picks the cheapest form, and malformed
packings raise CodecError (never a numpy error or a huge allocation)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traceformat import codec
from traceformat import format as fmt
from traceformat import reader as trace_reader
from traceformat.writer import TraceWriter


@pytest.mark.parametrize(
    "values, kind",
    [
        ([7] * 100, "c"),  # constant: no bytes per event
        (list(range(5, 105)), "d"),  # arithmetic progression (seq on one group): no bytes either
        ([0] * 50 + [1] * 50 + [2] * 50, "r"),  # steps: three runs
        ([1000, 1200, 1000, 1200, 1005, 1255] * 20, "f"),  # small range around a big base: 1 byte each
    ],
)
def test_cheapest_packing(values, kind):
    packed = codec.encode(np.array(values))
    assert packed[0] == kind
    assert codec.decode(packed, len(values)).tolist() == values


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**62), 2**62), min_size=1, max_size=300))
def test_round_trip_any_ints(values):
    assert codec.decode(codec.encode(np.array(values, dtype=np.int64)), len(values)).tolist() == values


@pytest.mark.parametrize(
    "packed, n",
    [
        (["f", 0, 2, b"\x00" * 5], 3),  # wrong byte count
        (["f", 0, 3, b"\x00" * 9], 3),  # no such width
        (["r", 2, ["c", 1], ["c", 5]], 3),  # runs add up to 10, not 3
        (["r", 10**12, ["c", 1], ["c", 1]], 3),  # impossible run count, not an allocation
        (["x", 1], 3),
        ([], 3),
    ],
)
def test_malformed_packings_raise(packed, n):
    with pytest.raises(codec.CodecError):
        codec.decode(packed, n)


def test_split_and_expand_agree():
    """Patterns + stream expand to the columns they came from; refs stay idx-relative."""
    n = 40
    cols = {name: np.full(n, 0 if dt == "u1" else -1, dtype=dt) for name, dt in fmt.COLUMNS}
    cols["op"] = (np.arange(n) % 4).astype(np.int32)
    cols["seq"] = np.arange(n) // 2
    cols["step"] = (np.arange(n) // 10).astype(np.int32)
    cols["ref"] = np.where(np.arange(n) % 4 == 3, np.arange(n) - 1, -1).astype(np.int32)  # wait on previous
    cols["ts"] = np.arange(n) * 0.001
    rc = codec.split(cols, fmt.COLUMNS)
    assert len(rc.patterns["op"]) == 4  # the ref offset repeats, so 4 patterns cover 40 events
    assert all(np.array_equal(rc[name], cols[name]) for name in fmt.COLUMN_NAMES)


def test_a_training_stream_packs_under_16_bytes_per_event(tmp_path):
    """Repetitive steps, interleaved groups, microsecond timestamps: the size goal of #8."""
    rng = np.random.default_rng(0)
    n = 20000
    cols = {name: np.full(n, 0 if dt == "u1" else -1, dtype=dt) for name, dt in fmt.COLUMNS}
    kind = np.arange(n) % 8
    cols.update(
        op=kind.astype(np.int32) % 3,
        group=(kind % 2).astype(np.int32),
        module=kind.astype(np.int32),
        seq=np.arange(n) // 2,
        step=(np.arange(n) // 800).astype(np.int32),
        in_bytes=(kind * 4096).astype(np.int64),
        ts=np.cumsum(rng.integers(5, 3000, n)) * 1e-6,
    )
    path = tmp_path / "t.trace"
    w = TraceWriter(path, fmt.make_header(world_size=2, ranks=[0], mode="fake"))
    w.group(0, "0", [0, 1], "default_pg")
    w.group(1, "1", [0, 1], "mesh_tp")
    for i in range(8):
        w.atom(f"a{i}")
    w.block(0, cols)
    w.end(0, n)
    w.footer()
    w.close()
    assert path.stat().st_size / n <= 16
    back = trace_reader.read_trace(path).columns[0]
    assert np.allclose(back["ts"], cols["ts"], atol=1e-6)
    assert all(np.array_equal(back[c], cols[c]) for c in fmt.COLUMN_NAMES if c != "ts")
