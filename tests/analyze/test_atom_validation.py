"""Atoms that passes read as structured values are validated once at load (analyzer/model/atoms.py):
a malformed one is read as none on the events that carry it, with one note; the rest of the
trace analyses as before. One test per atom kind, plus the healthy goldens (nothing touched)."""

import os
import re

import polars as pl
import pytest
from conftest import REPO

from analyzer.checks import run_checks
from analyzer.compare.diff import diff_traces
from analyzer.loader import load
from traceformat import parts as trace_parts
from traceformat import reader as trace_reader


def _rewritten(tmp_path, golden: str, pick, bad):
    """`golden` with every atom that `pick` selects replaced by `bad(atom)`, loaded; the atom ids."""
    data = trace_reader.read_trace(os.path.join(REPO, "traces", golden))
    ids = [i for i, a in enumerate(data.atoms) if pick(a)]
    assert ids
    for i in ids:
        data.atoms[i] = bad(data.atoms[i])
    out = tmp_path / f"odd_{golden}"
    trace_parts.write_data(out, data)
    return load(out), ids


def _note(t, what: str) -> bool:
    """The one note, counting distinct atoms (rewritten atoms that became equal are one)."""
    notes = [n for n in t.notes if n.startswith("malformed atoms read as none (not verified): ")]
    return len(notes) == 1 and re.search(rf": \d+ {what} atoms?$", notes[0]) is not None


def _is_mesh(a) -> bool:
    return isinstance(a, dict) and "dims" in a and "ranks" in a and "how" in a


def _is_splits(a) -> bool:
    return isinstance(a, list) and len(a) == 2 and isinstance(a[0], list)


@pytest.mark.parametrize("golden", ["fsdp_tp.trace", "fsdp_ep.trace"])
def test_healthy_goldens_have_no_malformed_atoms(golden):
    t = load(os.path.join(REPO, "traces", golden))
    assert not [n for n in t.notes if "malformed" in n]


@pytest.mark.parametrize(
    "bad",
    [
        lambda a: dict(a, dims=[7]),  # a dim name that is not text
        lambda a: dict(a, ranks=[0, 1.5]),  # a member that is not an int
        lambda a: dict(a, shape="2x2"),
        lambda a: ["not", "a", "map"],
    ],
)
def test_malformed_mesh_info_is_read_as_none(tmp_path, bad):
    t, _ = _rewritten(tmp_path, "fsdp_tp.trace", _is_mesh, bad)
    mesh = t.patterns.filter(pl.col("op") == "mesh")
    assert mesh.height > 0 and mesh["info"].to_list() == [-1] * mesh.height
    assert _note(t, "mesh info")
    assert run_checks(t).findings == []
    diff_traces(t, t)  # group keys built without the mesh labels


@pytest.mark.parametrize(
    "bad",
    [
        lambda a: [5, 6],  # sizes, not two lists (bench/fuzz.py seed 0, case 90190)
        lambda a: [a[0], [-1] * len(a[1])],  # a negative size
        lambda a: [a[0], [1 << 63] * len(a[1])],  # past int64 (a msgpack uint64): polars cannot hold it
        lambda a: [a[0]],
    ],
)
def test_malformed_all_to_all_splits_are_read_as_none(tmp_path, bad):
    t, _ = _rewritten(tmp_path, "fsdp_ep.trace", _is_splits, bad)
    a2a = t.patterns.filter(pl.col("op") == "all_to_all_single")
    assert a2a.height > 0 and a2a["splits"].to_list() == [-1] * a2a.height
    assert _note(t, "all_to_all splits")
    assert run_checks(t).findings == []
