"""The format's minor-version promise: a v2.1 trace that adds columns (anywhere in the header's
list, so in every row and pattern table), an extra per-event stream and a new record type is
read by this v2.0 reader by column name, the unknown parts skipped, and gives the same events."""

import io
import os

import msgpack
import numpy as np
import pytest
from conftest import REPO

from analyzer.compare.diff import diff_traces
from analyzer.loader import LoadError, load
from traceformat import codec
from traceformat import parts as trace_parts
from traceformat import reader as trace_reader
from traceformat.format import COLUMNS

GOLDEN = os.path.join(REPO, "traces", "fsdp_tp_pp_1f1b.trace")
EXTRA = [(5, ("energy_j", "<f8"), 0.25), (len(COLUMNS) + 1, ("numa_node", "<i4"), 3)]
"""(position in the new column list, column, value) of the columns a future minor version adds."""


def future_minor(src: bytes) -> bytes:
    """The same trace as format v2.1 would write it: two more columns, one more stream per
    block, a record type this reader does not know."""
    names = [list(c) for c in COLUMNS]
    for at, col, _ in EXTRA:
        names.insert(at, list(col))
    old_pattern = [n for n, _ in COLUMNS if n not in codec.STREAM_COLUMNS]
    new_pattern = [n for n, _ in names if n not in codec.STREAM_COLUMNS]
    out = []
    for rec in msgpack.Unpacker(io.BytesIO(src), raw=False, strict_map_key=False):
        if rec["t"] == "header":
            rec.update(version=[2, 1], columns=names)
        elif rec["t"] == "ev":
            for at, _, value in EXTRA:
                rec["v"].insert(at, value)
        elif rec["t"] == "pblock":
            table = codec.decode_table(rec["p"], rec["k"], len(old_pattern))
            cols = {n: table[:, j] for j, n in enumerate(old_pattern)}
            for _, (name, _), value in EXTRA:
                cols[name] = np.full(rec["k"], int(value * 4), dtype=np.int64)
            rec["p"] = codec.encode_table([cols[n] for n in new_pattern])
            rec["s"] = rec["s"] + [codec.encode(np.arange(rec["n"], dtype=np.int64))]
        out.append(msgpack.packb(rec, use_bin_type=True))
        if rec["t"] == "header":
            out.append(msgpack.packb({"t": "provenance", "host": "node-7"}, use_bin_type=True))
    return b"".join(out)


@pytest.mark.parametrize("form", ["blocks", "rows"])
def test_a_future_minor_version_reads_by_column_name(tmp_path, form):
    src = tmp_path / "src.trace"
    trace_parts.write_data(src, trace_reader.read_trace(GOLDEN), rows=form == "rows")
    fixture = tmp_path / "v2_1.trace"
    fixture.write_bytes(future_minor(src.read_bytes()))
    head = trace_reader.read_header(fixture)
    assert head["version"] == [2, 1] and ["energy_j", "<f8"] in head["columns"]
    old, new = load(src), load(fixture)
    assert new.notes == [] and not new.truncated
    assert new.events.equals(old.events)
    assert diff_traces(old, new).equal
    merged = tmp_path / "merged.trace"  # rewritten by this version: v2.0 with its own columns
    trace_parts.merge([fixture], merged)
    assert trace_reader.read_header(merged)["columns"] == [list(c) for c in COLUMNS]
    assert load(merged).events.equals(old.events)


@pytest.mark.parametrize(
    "change,why",
    [
        (lambda cols: [c for c in cols if c[0] != "seq"], "no column seq"),
        (lambda cols: [["op", "<i8"] if c[0] == "op" else c for c in cols], "column op is <i8, not <i4"),
        (lambda cols: cols + [cols[0]], "a column named twice"),
    ],
)
def test_a_layout_without_a_known_column_is_refused(tmp_path, change, why):
    recs = list(msgpack.Unpacker(io.BytesIO(open(GOLDEN, "rb").read()), raw=False, strict_map_key=False))
    recs[0]["columns"] = change(recs[0]["columns"])
    bad = tmp_path / "bad.trace"
    bad.write_bytes(b"".join(msgpack.packb(r, use_bin_type=True) for r in recs))
    with pytest.raises(LoadError, match=why):
        load(bad)
