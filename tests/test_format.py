"""Trace format v1: round trip, truncation at every byte, version and garbage refusal, merge."""

import msgpack
import numpy as np
import pytest

from tracer import format as fmt
from tracer import parts as trace_parts


def _header(ranks=(0, 1), **kw):
    return fmt.make_header(world_size=4, ranks=list(ranks), mode="fake", **kw)


def _events(n):
    return [{"op": "all_reduce", "group": 0, "seq": i, "dtype": "float32", "in_shapes": [[4, i]],
             "out_shapes": [[4, i]], "in_bytes": 16 * i, "out_bytes": 16 * i, "reduce_op": "sum",
             "frame": f"train.py:{i} in step"} for i in range(n)]


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "t.trace"
    trace_parts.write_all(path, _header(), {0: _events(5), 1: _events(3)},
                  groups=[{"gid": 0, "name": "0", "ranks": [0, 1, 2, 3], "desc": "default_pg"}])
    return path


def test_round_trip(trace_file):
    d = fmt.read_trace(trace_file)
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
    full = fmt.read_trace(trace_file)
    header_len = len(msgpack.packb(_header(), use_bin_type=True))
    cut_path = trace_file.parent / "cut.trace"
    seen = set()
    for cut in range(1, len(data)):
        cut_path.write_bytes(data[:cut])
        if cut < header_len:
            with pytest.raises(fmt.TraceFormatError):
                fmt.read_trace(cut_path)
            continue
        d = fmt.read_trace(cut_path)
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
        fmt.read_trace(path)


@pytest.mark.parametrize("content", [b"", b"hello world\n", b"\x00" * 64, msgpack.packb({"t": "header"}),
                                     msgpack.packb([1, 2, 3])])
def test_not_a_trace(tmp_path, content):
    path = tmp_path / "x.trace"
    path.write_bytes(content)
    with pytest.raises(fmt.TraceFormatError):
        fmt.read_trace(path)


def test_merge_parts_remaps_atoms_and_groups(tmp_path):
    g = {"gid": 0, "name": "7", "ranks": [0, 1], "desc": "mesh_tp"}
    other = {"gid": 0, "name": "8", "ranks": [2, 3], "desc": "mesh_tp"}
    trace_parts.write_all(tmp_path / "rank_0.part", _header([0], part=True), {0: _events(2)}, groups=[g])
    evs = [dict(e, op="broadcast") for e in _events(2)]
    trace_parts.write_all(tmp_path / "rank_2.part", _header([2], part=True), {2: evs}, groups=[other])
    summary = trace_parts.merge([tmp_path / "rank_0.part", tmp_path / "rank_2.part"], tmp_path / "m.trace")
    d = fmt.read_trace(tmp_path / "m.trace")
    assert d.complete and d.header["ranks"] == [0, 2] and not d.header["part"]
    assert {g["name"] for g in d.groups.values()} == {"7", "8"}
    assert [d.atoms[i] for i in d.columns[0]["op"]] == ["all_reduce"] * 2
    assert [d.atoms[i] for i in d.columns[2]["op"]] == ["broadcast"] * 2
    assert d.groups[int(d.columns[2]["group"][0])]["ranks"] == [2, 3]
    assert summary.ends[2]["status"] == "ok"
    combined = trace_parts.combine([fmt.read_trace(tmp_path / "rank_0.part"), fmt.read_trace(tmp_path / "rank_2.part")])
    assert [combined.atoms[i] for i in combined.columns[2]["op"]] == ["broadcast"] * 2


def test_columns_are_packed_blocks(trace_file, tmp_path):
    # merged traces store events as one bin block per column, read with frombuffer
    out = tmp_path / "merged.trace"
    trace_parts.merge([trace_file], out)
    kinds = [r["t"] for r in msgpack.Unpacker(open(out, "rb"), raw=False, strict_map_key=False)]
    assert kinds.count("block") == 2 and "ev" not in kinds
    d = fmt.read_trace(out)
    assert isinstance(d.columns[0]["in_bytes"], np.ndarray) and d.columns[0]["in_bytes"].dtype == np.int64
