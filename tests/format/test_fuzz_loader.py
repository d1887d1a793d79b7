"""Fuzz the loader: truncated and bit-flipped traces (merged blocks and streamed rows) load or
fail with LoadError, never anything else; whatever loads is checked and summarized cleanly.
Derandomized (the `ci` profile in conftest.py); examples that once failed are pinned."""

import os

import pytest
from conftest import REPO
from hypothesis import example, given, settings
from hypothesis import strategies as st

from analyzer.checks import run_checks
from analyzer.checks.common import majority
from analyzer.compare.summary import summarize
from analyzer.loader import LoadError, load
from traceformat import parts as trace_parts
from traceformat import reader as trace_reader
from traceformat.golden import canonical

_SAMPLES: dict[str, bytes] = {}


def _sample(recorded, tmp_path_factory, kind: str) -> bytes:
    """The recording made canonical (ts 0, repository-relative paths): the same bytes on every
    checkout, so a pinned example hits the same byte everywhere."""
    if not _SAMPLES:
        path, _ = recorded("bug_subgroup_skip", 8, "fake")
        data = canonical(trace_reader.read_trace(path), REPO, os.getcwd())
        folder = tmp_path_factory.mktemp("samples")
        trace_parts.write_data(folder / "all.trace", data)
        trace_parts.write_data(folder / "all.part", data, rows=True)
        _SAMPLES["blocks"] = (folder / "all.trace").read_bytes()
        _SAMPLES["rows"] = (folder / "all.part").read_bytes()
    return _SAMPLES[kind]


def test_ci_profile_is_derandomized():
    assert settings().derandomize and settings().database is None


@settings(max_examples=200)
@given(
    kind=st.sampled_from(["blocks", "rows"]),
    cut=st.floats(0, 1),
    flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 7)), max_size=6),
)
# a rank issued a collective on a group none of whose members left a stream: majority() of no votes
@example(kind="rows", cut=0.478, flips=[(0.17173466978426744, 6)])
def test_truncated_and_bit_flipped_traces(recorded, tmp_path_factory, kind, cut, flips):
    data = bytearray(_sample(recorded, tmp_path_factory, kind))
    if cut < 0.98:
        data = data[: max(1, int(len(data) * cut))]
    for where, bit in flips:
        data[min(len(data) - 1, int(where * len(data)))] ^= 1 << bit
    path = tmp_path_factory.mktemp("fuzz") / "f.trace"
    path.write_bytes(bytes(data))
    try:
        t = load(path)
    except LoadError:
        return
    run_checks(t)
    summarize(t)


def test_majority_of_no_votes():
    assert majority({}) == (None, [])
    assert majority({0: "a", 1: "a", 2: "b"}) == ("a", [2])
    assert majority({0: "a", 1: "b"}) == ("a", [0, 1])


def test_group_whose_majority_issued_nothing(tmp_path):
    """bench/fuzz.py case 164 (seed 0), reduced: two dumps, the group's lower rank recorded
    nothing on it, so the majority's stream is empty (a tie: both ranks are culprits); the
    alignment once read the representative's rank from its first row."""
    import pickle
    import sys

    sys.path.insert(0, os.path.join(REPO, "tests", "flight_recorder"))
    import corpus

    ar = corpus.entry(0, "allreduce", 1, [[4]], [[4]])
    sub = ("1", "sub")
    cfg = corpus.config(2, ("1", "sub", [0, 1]))
    per = corpus.dumps({0: [ar], 1: [ar, dict(ar, process_group=sub, pg_id=1, state="started")]}, cfg)
    for r, d in per.items():
        (tmp_path / f"rank_{r}").write_bytes(pickle.dumps(d, protocol=2))
    found = run_checks(load(tmp_path)).findings
    assert [(f.kind.name, f.culprit_ranks) for f in found if f.group["name"] == "1"] == [("missing_collective", [0])]


@pytest.mark.parametrize("field, value", [("gid", 1 << 31), ("gid", -(1 << 63)), ("ranks", [0, 1 << 40])])
def test_group_record_out_of_int32_range_is_refused(tmp_path, field, value):
    """bench/fuzz.py seed 0, cases 4135 / 4280: a bit flip made a group id 2**31, which the
    frames' int32 column could not hold (a TypeError out of polars, not a LoadError)."""
    import io

    import msgpack

    src = tmp_path / "src.trace"
    trace_parts.write_data(src, trace_reader.read_trace(os.path.join(REPO, "traces", "fsdp.trace")))
    out = []
    for rec in msgpack.Unpacker(io.BytesIO(src.read_bytes()), raw=False, strict_map_key=False):
        if rec["t"] == "group" and rec["gid"] == 0:
            rec[field] = value
        out.append(msgpack.packb(rec, use_bin_type=True))
    bad = tmp_path / "bad.trace"
    bad.write_bytes(b"".join(out))
    with pytest.raises(LoadError, match="out of range"):
        load(bad)


def _fr_folder(tmp_path, per_rank_bytes: dict[int, bytes]):
    for r, data in per_rank_bytes.items():
        (tmp_path / f"rank_{r}").write_bytes(data)
    return tmp_path


def test_fr_dump_with_a_non_string_group_name_is_refused(tmp_path):
    """bench/fuzz.py seed 0, case 10373: an entry's process_group (3, 'x') sorted among string names."""
    import pickle
    import sys

    sys.path.insert(0, os.path.join(REPO, "tests", "flight_recorder"))
    import corpus

    ar = corpus.entry(0, "allreduce", 1, [[4]], [[4]])
    per = corpus.dumps({0: [ar], 1: [dict(ar, process_group=[3, "x"])]}, corpus.config(2))
    folder = _fr_folder(tmp_path, {r: pickle.dumps(d, protocol=2) for r, d in per.items()})
    with pytest.raises(LoadError, match="rank_1: not a Flight Recorder dump"):
        load(folder)


def test_fr_pickle_with_an_impossible_length_is_refused(tmp_path):
    """bench/fuzz.py seed 0, case 9503: BYTEARRAY8 of 2**64 - 1 bytes raised OverflowError."""
    import pickle

    good = pickle.dumps({"version": "2.10", "rank": 0, "entries": []}, protocol=2)
    bad = b"\x80\x05\x96" + (2**64 - 1).to_bytes(8, "little")
    with pytest.raises(LoadError, match="rank_1: not a readable Flight Recorder dump"):
        load(_fr_folder(tmp_path, {1: bad}))
    t = load(_fr_folder(tmp_path, {0: good}))  # beside a good dump: a note, rank 1 is missing
    assert any("rank_1" in n for n in t.notes), t.notes


def test_end_record_with_an_error_that_is_not_text_is_refused(tmp_path):
    """bench/fuzz.py seed 0, case 39080 (at 35ea394): a rank's end record whose error is a list
    was grouped by as a dict key (TypeError: unhashable)."""
    import io

    import msgpack

    src = tmp_path / "src.trace"
    trace_parts.write_data(src, trace_reader.read_trace(os.path.join(REPO, "traces", "fsdp.trace")))
    out = []
    for rec in msgpack.Unpacker(io.BytesIO(src.read_bytes()), raw=False, strict_map_key=False):
        if rec["t"] == "end":
            rec.update(status="error", error=["not", "text"])
        out.append(msgpack.packb(rec, use_bin_type=True))
    bad = tmp_path / "bad.trace"
    bad.write_bytes(b"".join(out))
    with pytest.raises(LoadError, match=r"bad.trace: corrupt record at byte \d+ \(end record"):
        load(bad)


def test_header_rank_list_that_is_not_ints_is_refused(tmp_path):
    """bench/fuzz.py seed 0, case 47637 (at 35ea394): a part whose header `ranks` is a float
    crashed the parts folder's combine (TypeError: not iterable)."""
    import io

    import msgpack

    data = trace_reader.read_trace(os.path.join(REPO, "traces", "fsdp.trace"))
    trace_parts.write_data(tmp_path / "p.part", data, rows=True)
    folder = tmp_path / "parts"
    folder.mkdir()
    out = []
    for rec in msgpack.Unpacker(io.BytesIO((tmp_path / "p.part").read_bytes()), raw=False, strict_map_key=False):
        if rec["t"] == "header":
            rec["ranks"] = 0.5
        out.append(msgpack.packb(rec, use_bin_type=True))
    (folder / "rank_00000.part").write_bytes(b"".join(out))
    with pytest.raises(LoadError, match=r"rank_00000.part: corrupt header \(ranks\)"):
        load(folder)


def test_mesh_atom_with_odd_members_is_skipped_by_normalize(tmp_path):
    """bench/fuzz.py seed 0, case 49371 (at 35ea394): a mesh event's info atom whose `ranks`
    held a dict was sorted with ints in diff's group normalization."""
    from analyzer.compare.diff import diff_traces

    data = trace_reader.read_trace(os.path.join(REPO, "traces", "fsdp_tp.trace"))
    meshes = [i for i, a in enumerate(data.atoms) if isinstance(a, dict) and a.get("dims") and a.get("ranks")]
    assert meshes
    for i in meshes:
        data.atoms[i] = dict(data.atoms[i], dims=data.atoms[i]["dims"][:1], ranks=[0, {"x": 1}])
    trace_parts.write_data(tmp_path / "odd.trace", data)
    t = load(tmp_path / "odd.trace")
    diff_traces(t, t)  # group keys built without the odd mesh


def test_all_to_all_splits_atom_that_is_not_two_int_lists_is_not_verified(tmp_path):
    """bench/fuzz.py seed 0, case 90190: an all_to_all_single's splits atom [5, 6] (ints, not
    two lists) went into the split table's list columns (TypeError out of polars)."""
    data = trace_reader.read_trace(os.path.join(REPO, "traces", "fsdp_ep.trace"))
    splits = [i for i, a in enumerate(data.atoms) if isinstance(a, list) and len(a) == 2 and isinstance(a[0], list)]
    assert splits
    for i in splits:
        data.atoms[i] = [5, 6]
    trace_parts.write_data(tmp_path / "odd.trace", data)
    assert [f.kind.name for f in run_checks(load(tmp_path / "odd.trace")).findings] == []
