"""Flight Recorder dumps: real gloo dumps of seeded bugs (tests/flight_recorder/make_dumps.py, generated once
per session) in pickle, JSON and repaired-pickle form give the right kind and culprit; the
restricted unpickler refuses code; the importer needs no torch."""

import json
import os
import pickle
import subprocess
import sys

import polars as pl
import pytest
from conftest import BIN, HERE, REPO

from analyzer.checks import run_checks
from analyzer.loader import LoadError, load

pytestmark = pytest.mark.records  # real gloo ranks make the dumps (module fixture)

FORMS = ("pickle", "json", "repaired")
# case -> (kind, culprit ranks, group label); None: no findings
EXPECTED = {
    "healthy": None,
    "size": ("shape_mismatch", [2], "world"),
    "op": ("op_mismatch", [1], "world"),
    "skip": ("missing_collective", [2], "world"),
    "dead": ("missing_rank", [3], "world"),
}


@pytest.fixture(scope="session")
def fr_dumps(tmp_path_factory):
    out = tmp_path_factory.mktemp("fr_dumps")
    subprocess.run(
        [sys.executable, os.path.join(HERE, "flight_recorder", "make_dumps.py"), str(out)],
        check=True,
        capture_output=True,
        timeout=1200,
        cwd=REPO,
    )
    return out


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_seeded_bug_has_right_kind_and_culprit(fr_dumps, case, form):
    found = run_checks(load(fr_dumps / case / form)).findings
    expected = EXPECTED[case]
    got = [(f.kind.name, f.culprit_ranks, f.group["label"]) for f in found]
    assert got == ([] if expected is None else [expected]), [f.message for f in found]


def test_skip_is_one_finding_at_the_skipped_collective(fr_dumps):
    (f,) = run_checks(load(fr_dumps / "skip" / "pickle")).findings
    assert f.detail == "skipped" and "make_dumps.py" in f.message


def test_dead_rank_is_missing_and_the_rest_analysed(fr_dumps):
    for form in FORMS:
        t = load(fr_dumps / "dead" / form)
        assert t.ranks == [0, 1, 2] and t.missing_ranks == [3] and t.world_size == 4
        assert any("missing ranks" in n for n in t.notes)
    (f,) = run_checks(load(fr_dumps / "dead" / "pickle")).findings
    assert f.waiting == [0, 1, 2] and f.op == "all_reduce"


def test_frames_and_normalised_conventions(fr_dumps):
    """Healthy dumps: DTensor's all-gather and gloo's reduce_scatter-as-all_reduce come out in
    commtrace's vocabulary and shapes; state, seq from 0, user frames."""
    t = load(fr_dumps / "healthy" / "pickle")
    ev = t.events.filter(pl.col("rank") == 0).with_columns(op=pl.col("op").cast(pl.String))
    ops = ev["op"].to_list()
    assert ops[:4] == ["all_reduce", "all_reduce", "all_gather_into_tensor", "all_gather"]
    assert "reduce_scatter_tensor" in ops and "scatter" in ops and "broadcast" in ops
    world = ev.filter(pl.col("group") == t.groups.filter(pl.col("label") == "world")["gid"][0])
    assert world["seq"].to_list() == list(range(len(world)))
    ag = ev.filter(pl.col("op") == "all_gather_into_tensor").row(0, named=True)
    assert t.atom(ag["in_shapes"]) == [[4]] and t.atom(ag["out_shapes"]) == [[16]]
    rs = ev.filter(pl.col("op") == "reduce_scatter_tensor").row(0, named=True)
    assert t.atom(rs["in_shapes"]) == [[8]] and t.atom(rs["out_shapes"]) == [[2]]
    assert ag["frame"].endswith("in _warmup") and "make_dumps.py" in ag["frame"]
    assert set(ev["state"].to_list()) <= {"scheduled", "started", "completed"}
    assert ev["state"][-1] != "completed" or ev["state"][0] == "completed"
    assert sorted(t.groups["label"].to_list()) == ["dp", "dp", "tp", "tp", "world"]


def test_groups_same_from_pg_config_and_inferred(fr_dumps):
    raw, repaired = load(fr_dumps / "healthy" / "pickle"), load(fr_dumps / "healthy" / "repaired")
    key = lambda t: sorted((g["name"], tuple(g["ranks"]), g["desc"]) for g in t.groups.iter_rows(named=True))  # noqa: E731
    assert key(raw) == key(repaired)
    assert any("inferred" in n for n in raw.notes) and not any("inferred" in n for n in repaired.notes)


def test_cycle_dumps_load(fr_dumps):
    """The cross-group order cycle (asserted on by the hang analysis): each rank's last entry is
    the ring group it entered first, not completed."""
    for form in FORMS:
        t = load(fr_dumps / "cycle" / form)
        assert t.ranks == [0, 1, 2, 3]
        last = t.events.sort("idx").group_by("rank").last().sort("rank")
        assert (last["state"] != "completed").all()
        sizes = t.groups.filter(pl.col("gid").is_in(last["group"].to_list()))["size"].to_list()
        assert sizes == [2, 2, 2, 2]


def test_cli_check_on_dump_folders(fr_dumps):
    p = subprocess.run(
        [os.path.join(BIN, "analyzer"), "check", str(fr_dumps / "size" / "json"), "--json"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 1
    (f,) = json.loads(p.stdout)["findings"]
    assert f["kind"] == "shape_mismatch" and f["culprit_ranks"] == [2] and f["seq"] is not None
    p = subprocess.run(
        [os.path.join(BIN, "analyzer"), "check", str(fr_dumps / "healthy" / "pickle")], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stdout + p.stderr


def test_one_dump_file_and_any_naming(fr_dumps, tmp_path):
    t = load(fr_dumps / "healthy" / "json" / "trace_node01_3.json")
    assert t.ranks == [3]
    for r, src in enumerate(sorted((fr_dumps / "size" / "pickle").iterdir())):
        (tmp_path / f"nccl_trace_host{r + 7:02d}_{r}").write_bytes(src.read_bytes())
    assert [(f.kind.name, f.culprit_ranks) for f in run_checks(load(tmp_path)).findings] == [("shape_mismatch", [2])]


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malicious_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    folder = tmp_path / "dumps"
    folder.mkdir()
    evil = {"version": "2.10", "pg_config": {}, "entries": [_Evil(str(marker))]}
    (folder / "rank_0").write_bytes(pickle.dumps(evil))
    with pytest.raises(LoadError, match="refused.*posix.system|refused.*os.system"):
        load(folder)
    assert not marker.exists()
    p = subprocess.run([os.path.join(BIN, "analyzer"), "check", str(folder)], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("error:") and "refused" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and not marker.exists()


def test_importer_needs_no_torch(fr_dumps):
    code = (
        "import sys; from analyzer.loader import load; from analyzer.checks import run_checks; "
        f"run_checks(load({str(fr_dumps / 'op' / 'pickle')!r})); assert 'torch' not in sys.modules, 'torch'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_parallel_read_matches_sequential(fr_dumps, monkeypatch):
    from analyzer.sources.flight_recorder import load as fr

    base = load(fr_dumps / "size" / "repaired").events
    monkeypatch.setattr(fr, "PARALLEL_FROM", 1)
    monkeypatch.setattr(fr, "_workers", lambda n, jobs: 2)
    assert load(fr_dumps / "size" / "repaired").events.equals(base)


@pytest.mark.parametrize("form", FORMS)
def test_cross_group_cycle_from_the_entries_each_rank_is_stuck_in(fr_dumps, form):
    """A 4-rank ring of 2-rank groups entered in orders that wait on each other: `check` and
    `hang` both give exactly one deadlock_cycle through the four groups (the missing
    collectives it causes are symptoms, not findings)."""
    from analyzer.hang import analyze

    t = load(fr_dumps / "cycle" / form)
    found = run_checks(t).findings
    assert [(f.kind.name, f.culprit_ranks) for f in found] == [("deadlock_cycle", [0, 1, 2, 3])], [
        f.message for f in found
    ]
    assert len(found[0].groups) == 4
    report = analyze(t)
    assert report.semantics == "post-mortem" and sorted(report.stuck) == [0, 1, 2, 3]
    assert [(f.kind.name, f.culprit_ranks) for f in report.findings] == [("deadlock_cycle", [0, 1, 2, 3])]


@pytest.mark.parametrize("form", ["json", "repaired"])
def test_hang_names_the_dead_rank_and_what_it_should_run_next(fr_dumps, form):
    """Rank 3 died without a dump: ranks 0-2 are stuck in the faulty all_reduce; against the
    healthy run's dumps as the expected pattern, it should have run that all_reduce."""
    from analyzer.hang import analyze

    report = analyze(load(fr_dumps / "dead" / form), load(fr_dumps / "healthy" / form))
    assert sorted(report.stuck) == [0, 1, 2]
    (root,) = report.findings
    assert root.kind.name == "stalled_rank" and root.culprit_ranks == [3]
    assert root.waiting_ranks == [0, 1, 2]
    assert root.expected_next["op"] == "all_reduce"


@pytest.mark.parametrize("form", FORMS)
def test_gloo_mesh_cross_group_deadlock_dumped_after_the_timeout(fr_dumps, form):
    """Real gloo 2 x 2 mesh: ranks 0 and 3 enter tp first, 1 and 2 dp first; dumps written after
    the groups' timeout. Each group's instance has one of its two members, so matching alone
    sees four missing collectives: check and hang both give the one cycle 0 -> 1 -> 3 -> 2 -> 0."""
    from analyzer.hang import analyze

    t = load(fr_dumps / "mesh" / form)
    for found in (run_checks(t).findings, analyze(t).findings):
        assert [(f.kind.name, f.culprit_ranks) for f in found] == [("deadlock_cycle", [0, 1, 2, 3])]
        cycle = found[0].cycle
        assert cycle[cycle.index(0) :] + cycle[: cycle.index(0)] == [0, 1, 3, 2]


@pytest.mark.parametrize("form", FORMS)
def test_hang_from_the_frontier_is_the_whole_historys_verdict(fr_dumps, form):
    """Real gloo dumps (every seeded case, raw pickle, JSON, repaired): `analyzer hang`'s default
    reading (each group's frontier and the history just before it, issue 39) gives the verdict
    of every rank's whole history, down to the least history it keeps."""
    from analyzer.hang import analyze
    from analyzer.sources.flight_recorder.options import ReadOptions

    def verdict(t):
        r = analyze(t)
        return [(f.kind.name, f.culprit_ranks, f.message) for f in r.findings], {
            k: (b.key, b.waits_for) for k, b in r.stuck.items()
        }

    for case in ("healthy", "size", "op", "skip", "dead", "cycle", "mesh"):
        path = fr_dumps / case / form
        full = verdict(load(path))
        assert verdict(load(path, fr=ReadOptions(frontier=True))) == full, case
        assert verdict(load(path, fr=ReadOptions(frontier=True, context=1)))[1] == full[1], case
