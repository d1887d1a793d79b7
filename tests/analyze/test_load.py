"""The loader's two frames (patterns + stream) read like the full events frame: `select` and
`with_patterns` agree with filtering `events`, and a merged trace (decoded into the reader's
arena, handed to polars as is) loads the same as its per-rank parts (concatenated)."""

import os

import polars as pl
from polars.testing import assert_frame_equal

from analyzer.loader import load
from traceformat import format as fmt
from traceformat import parts as trace_parts
from traceformat import reader as trace_reader

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(REPO, "traces", "fsdp_tp_pp_1f1b.trace")  # p2p, waits, several groups


def test_select_is_a_filtered_events_frame():
    t = load(GOLDEN)
    ops = ["send", "recv", "wait", "all_gather_into_tensor"]
    cols = ["rank", "idx", "op", "group", "seq", "peer", "ref", "parent", "frame", "step", "ts"]
    want = t.events.filter(pl.col("op").cast(pl.String).is_in(ops)).select(cols)
    got = t.select(*cols, ops=ops)
    assert got.height == want.height > 0
    assert_frame_equal(got, want)
    assert_frame_equal(t.select(*cols, ops=ops, ranks=[3]), want.filter(pl.col("rank") == 3))
    assert (t.events.filter(pl.col("op") == "wait")["ref"] >= 0).all()  # refs resolved from "events back"


def test_merged_trace_loads_like_its_parts(tmp_path):
    """Arena path (one merged file) vs concatenation path (a folder of row parts)."""
    data = trace_reader.read_trace(GOLDEN)
    for rank in sorted(data.columns):
        part = fmt.TraceData(
            header=dict(data.header, ranks=[rank], part=True),
            atoms=data.atoms,
            groups=data.groups,
            columns={rank: data.columns[rank]},
            ends={rank: data.ends[rank]},
        )
        trace_parts.write_data(tmp_path / f"rank_{rank:05d}.part", part, rows=True)
    merged, from_parts = load(GOLDEN), load(tmp_path)
    assert merged.stream["code"].n_chunks() == 1  # the arena's buffers became one chunk per column
    cols = ["rank", "idx", "op", "group", "seq", "peer", "in_shapes", "in_bytes", "module", "frame", "ref", "step"]
    a = merged.events.select(cols).with_columns(pl.col(pl.Categorical).cast(pl.String))
    b = from_parts.events.select(cols).with_columns(pl.col(pl.Categorical).cast(pl.String))
    # atom ids may be numbered differently; compare what they mean
    a = a.with_columns(in_shapes=pl.col("in_shapes").map_elements(lambda i: str(merged.atom(i)), pl.String))
    b = b.with_columns(in_shapes=pl.col("in_shapes").map_elements(lambda i: str(from_parts.atom(i)), pl.String))
    assert_frame_equal(a, b)


def test_package_load_stays_the_function_once_the_loader_module_is_imported():
    """`from analyzer import load` (the README's notebook entry point) is the function even after
    the loader module was imported (a submodule named `load` used to replace it on the package)."""
    import analyzer
    import analyzer.loader  # noqa: F401
    from analyzer import load as entry

    assert entry is analyzer.load and callable(entry) and entry.__module__ == "analyzer"
    t = entry(GOLDEN)
    assert t.ranks == load(GOLDEN).ranks
