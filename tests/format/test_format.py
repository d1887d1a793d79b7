"""Trace format v2: round trip, truncation at every byte, version and garbage refusal, merge."""

import msgpack
import numpy as np
import pytest

from traceformat import format as fmt
from traceformat import parts as trace_parts
from traceformat import reader as trace_reader


def _header(ranks=(0, 1), **kw):
    return fmt.make_header(world_size=4, ranks=list(ranks), mode="fake", **kw)


def _events(n):
    return [
        {
            "op": "all_reduce",
            "group": 0,
            "seq": i,
            "dtype": "float32",
            "in_shapes": [[4, i]],
            "out_shapes": [[4, i]],
            "in_bytes": 16 * i,
            "out_bytes": 16 * i,
            "reduce_op": "sum",
            "frame": f"train.py:{i} in step",
        }
        for i in range(n)
    ]


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "t.trace"
    trace_parts.write_all(
        path,
        _header(),
        {0: _events(5), 1: _events(3)},
        groups=[{"gid": 0, "name": "0", "ranks": [0, 1, 2, 3], "desc": "default_pg"}],
    )
    return path


def test_round_trip(trace_file):
    d = trace_reader.read_trace(trace_file)
    assert d.complete and d.truncated_at is None and d.notes == []
    assert d.header["version"] == list(fmt.VERSION) and d.header["world_size"] == 4
    assert sorted(d.columns) == [0, 1]
    assert d.columns[0]["seq"].tolist() == [0, 1, 2, 3, 4]
    assert [d.atoms[i] for i in d.columns[1]["in_shapes"]] == [[[4, 0]], [[4, 1]], [[4, 2]]]
    assert d.groups[0]["ranks"] == [0, 1, 2, 3]
    assert d.ends == {0: {"n": 5, "status": "ok", "error": None}, 1: {"n": 3, "status": "ok", "error": None}}
    # interned: the op name is stored once
    assert d.atoms.count("all_reduce") == 1


def test_every_truncation_keeps_the_complete_prefix(trace_file):
    data = trace_file.read_bytes()
    full = trace_reader.read_trace(trace_file)
    header_len = len(msgpack.packb(_header(), use_bin_type=True))
    cut_path = trace_file.parent / "cut.trace"
    seen = set()
    for cut in range(1, len(data)):
        cut_path.write_bytes(data[:cut])
        if cut < header_len:
            with pytest.raises(fmt.TraceFormatError):
                trace_reader.read_trace(cut_path)
            continue
        d = trace_reader.read_trace(cut_path)
        assert d.truncated_at is not None and not d.complete
        assert any("truncated" in n for n in d.notes)
        for rank, cols in d.columns.items():
            n = len(cols["seq"])
            assert cols["seq"].tolist() == full.columns[rank]["seq"][:n].tolist()
        seen.add(sum(len(c["seq"]) for c in d.columns.values()))
    assert seen == set(range(0, 9))  # every prefix length of the 8 events was produced


def test_newer_major_version_refused(tmp_path):
    path = tmp_path / "new.trace"
    header = _header()
    header["version"] = [fmt.VERSION[0] + 1, 0]
    path.write_bytes(msgpack.packb(header))
    with pytest.raises(fmt.TraceFormatError, match="newer than this reader"):
        trace_reader.read_trace(path)


@pytest.mark.parametrize(
    "content", [b"", b"hello world\n", b"\x00" * 64, msgpack.packb({"t": "header"}), msgpack.packb([1, 2, 3])]
)
def test_not_a_trace(tmp_path, content):
    path = tmp_path / "x.trace"
    path.write_bytes(content)
    with pytest.raises(fmt.TraceFormatError):
        trace_reader.read_trace(path)


def test_merge_parts_remaps_atoms_and_groups(tmp_path):
    g = {"gid": 0, "name": "7", "ranks": [0, 1], "desc": "mesh_tp"}
    other = {"gid": 0, "name": "8", "ranks": [2, 3], "desc": "mesh_tp"}
    trace_parts.write_all(tmp_path / "rank_0.part", _header([0], part=True), {0: _events(2)}, groups=[g])
    evs = [dict(e, op="broadcast") for e in _events(2)]
    trace_parts.write_all(tmp_path / "rank_2.part", _header([2], part=True), {2: evs}, groups=[other])
    summary = trace_parts.merge([tmp_path / "rank_0.part", tmp_path / "rank_2.part"], tmp_path / "m.trace")
    d = trace_reader.read_trace(tmp_path / "m.trace")
    assert d.complete and d.header["ranks"] == [0, 2] and not d.header["part"]
    assert {g["name"] for g in d.groups.values()} == {"7", "8"}
    assert [d.atoms[i] for i in d.columns[0]["op"]] == ["all_reduce"] * 2
    assert [d.atoms[i] for i in d.columns[2]["op"]] == ["broadcast"] * 2
    assert d.groups[int(d.columns[2]["group"][0])]["ranks"] == [2, 3]
    assert summary.ends[2]["status"] == "ok"
    combined = trace_parts.combine(
        [trace_reader.read_trace(tmp_path / "rank_0.part"), trace_reader.read_trace(tmp_path / "rank_2.part")]
    )
    assert [combined.atoms[i] for i in combined.columns[2]["op"]] == ["broadcast"] * 2


def test_columns_are_packed_blocks(trace_file, tmp_path):
    # merged traces store each rank's events as one pattern-coded block
    out = tmp_path / "merged.trace"
    trace_parts.merge([trace_file], out)
    kinds = [r["t"] for r in msgpack.Unpacker(open(out, "rb"), raw=False, strict_map_key=False)]
    assert kinds.count("pblock") == 2 and "ev" not in kinds
    d = trace_reader.read_trace(out)
    assert isinstance(d.columns[0]["in_bytes"], np.ndarray) and d.columns[0]["in_bytes"].dtype == np.int64


def test_v1_plain_blocks_are_still_read(tmp_path):
    """A v1 file (plain column blocks) written by hand reads the same as its v2 rewrite."""
    cols = {name: np.full(3, 0 if dt == "u1" else -1, dtype=dt) for name, dt in fmt.COLUMNS}
    cols.update(op=np.zeros(3, np.int32), group=np.zeros(3, np.int32), seq=np.arange(3), ts=np.array([0.5, 1.0, 2.25]))
    header = dict(_header([0]), version=[1, 0])
    path = tmp_path / "v1.trace"
    with open(path, "wb") as f:
        for rec in (
            header,
            {"t": "group", "gid": 0, "name": "0", "ranks": [0, 1, 2, 3], "desc": "default_pg"},
            {"t": "atoms", "base": 0, "v": ["all_reduce"]},
            {
                "t": "block",
                "r": 0,
                "n": 3,
                "c": [np.ascontiguousarray(cols[n], dtype=dt).tobytes() for n, dt in fmt.COLUMNS],
            },
            {"t": "end", "r": 0, "n": 3, "status": "ok", "error": None},
            {"t": "footer"},
        ):
            f.write(msgpack.packb(rec, use_bin_type=True))
    d = trace_reader.read_trace(path)
    assert d.columns[0]["seq"].tolist() == [0, 1, 2] and d.columns[0]["ts"].tolist() == [0.5, 1.0, 2.25]
    trace_parts.write_data(tmp_path / "v2.trace", d)
    again = trace_reader.read_trace(tmp_path / "v2.trace")
    assert again.header["version"] == list(fmt.VERSION)
    assert {k: again.columns[0][k].tolist() for k in fmt.COLUMN_NAMES} == {k: v.tolist() for k, v in cols.items()}
