"""The peer corpus (tests/flight_recorder/corpus.py): PyTorch's test_fr_analysis.py scenarios, NCCL hang
shapes and conventions, gloo's status that counts a timed-out collective, as dump folders.
Each gives exactly the hand-derived findings from `check` and root causes from `hang`."""

import json
import os
import subprocess
import sys

import pytest
from conftest import BIN, HERE

from analyzer.checks import run_checks
from analyzer.hang import analyze
from analyzer.loader import load
from analyzer.report import ReportInputs, build_report

sys.path.insert(0, os.path.join(HERE, "flight_recorder"))
import corpus  # noqa: E402

CASES = corpus.cases()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    out = tmp_path_factory.mktemp("fr_corpus")
    corpus.write(str(out))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_case_verdict(folders, case):
    _, want_check, want_hang = CASES[case]
    t = load(folders / case)
    found = run_checks(t).findings
    assert sorted((f.kind.name, f.culprit_ranks) for f in found) == sorted(want_check), [f.message for f in found]
    if want_hang is not None:
        report = analyze(t)
        assert [(f.kind.name, f.culprit_ranks) for f in report.findings] == want_hang, [
            f.message for f in report.findings
        ]


def test_swapped_groups_every_member_issued_every_op(folders):
    """Matching alone sees nothing (each group's instance has both members); the states and the
    per-rank order show rank 0 blocked in grp_a waiting for 1, rank 1 in grp_b waiting for 0."""
    report = analyze(load(folders / "nccl_swapped_groups"))
    assert {r: b.waits_for for r, b in report.stuck.items()} == {0: [1], 1: [0]}
    assert {r: b.event["seq"] for r, b in report.stuck.items()} == {0: 0, 1: 0}


def test_pipeline_every_stuck_rank_found(folders):
    """Ranks 0-2 are `started` in sends (rank 2's unmatched, ranks 0 and 1's matched by recvs
    scheduled behind a stuck op): all three are stuck, waiting along the pipeline on rank 3,
    which never posted its recv. check, hang and report all name rank 3 and the three stuck."""
    t = load(folders / "nccl_pipeline_started_p2p")
    report = analyze(t)
    assert {r: b.waits_for for r, b in report.stuck.items()} == {0: [1], 1: [2], 2: [3]}
    assert report.findings[0].waiting_ranks == [0, 1, 2]
    assert "never entered recv #0 2->3" in report.findings[0].message
    (f,) = run_checks(t).findings
    assert f.detail == "never_posted" and f.waiting_ranks == [0, 1, 2] and f.ranks == [0, 1, 2, 3]
    assert f.message.startswith("rank 3 never posted the recv matching rank 2's send #0 to rank 3")
    merged = build_report(t, ReportInputs(source="x")).findings
    assert {r for g in merged for r in g.culprit_ranks} == {3}


def test_wrong_peer_blames_the_sender_not_the_idle_destination(folders):
    """Rank 2 sent to 0 instead of 3: rank 0 is idle (hang blamed it as stalled); one finding,
    culprit 2, with rank 3 stuck behind it, from check, hang and report alike."""
    t = load(folders / "nccl_pipeline_wrong_peer")
    (f,) = run_checks(t).findings
    assert (f.detail, f.meant_peer, f.waiting_ranks) == ("wrong_peer", 3, [2, 3])
    (root,) = analyze(t).findings
    assert (root.kind.name, root.culprit_ranks, root.waiting_ranks) == ("unmatched_p2p", [2], [2, 3])
    assert [(g.kind.name, g.culprit_ranks) for g in build_report(t, ReportInputs(source="x")).findings] == [
        ("unmatched_p2p", [2])
    ]


def test_gloo_status_never_hides_the_cycle(folders):
    """pg_status says every collective completed (gloo counts the timed-out ones): the cycle
    0 -> 1 -> 3 -> 2 -> 0 through the four mesh groups is found; no missing_collective symptom."""
    t = load(folders / "gloo_mesh_cross_group_timeout")
    (f,) = run_checks(t).findings
    assert f.kind.name == "deadlock_cycle" and len(f.groups) == 4
    cycle = f.cycle
    start = cycle.index(0)
    assert cycle[start:] + cycle[:start] == [0, 1, 3, 2]


def test_coalesced_blocks_are_one_event_each(folders):
    """FSDP's coalesced all-gathers: the 3 ops and the ALLGATHER_coalesced marker of one block are
    one all_gather_into_tensor_coalesced with the 3 shapes; FR's collective_seq_id is kept."""
    t = load(folders / "fsdp_coalesced_healthy")
    ev = t.events.filter(t.events["rank"] == 0)
    assert ev["op"].cast(str).to_list() == ["all_gather_into_tensor_coalesced", "reduce_scatter_tensor_coalesced"] * 3
    assert ev["seq"].to_list() == [0, 1, 2, 3, 4, 5] and ev["fr_seq"].to_list() == [1, 2, 3, 4, 5, 6]
    assert ev["record_id"].to_list() == [3, 7, 11, 15, 19, 23]


def test_dump_numbers_in_message_and_json(folders):
    (f,) = run_checks(load(folders / "nccl_wrapped_size_mismatch")).findings
    assert f.seq == 30 and f.fr["collective_seq_id"] == [31]
    assert f.fr["record_id"] == {0: 30, 1: 30, 2: 30, 3: 30}
    assert "FR collective_seq_id 31" in f.message and f.seq_numbering.startswith("commtrace")


def test_cli_json_says_which_numbering(folders):
    p = subprocess.run(
        [os.path.join(BIN, "analyzer"), "check", str(folders / "nccl_output_side_mismatch"), "--json"],
        capture_output=True,
        text=True,
    )
    found = json.loads(p.stdout)["findings"]
    assert p.returncode == 1 and {f["kind"] for f in found} == {"shape_mismatch", "dtype_mismatch"}
    assert all(f["seq_numbering"].startswith("commtrace") and "collective_seq_id" in f["fr"] for f in found)


@pytest.mark.parametrize(
    "entries, why",
    [
        ([{"bogus": 1}], "rank_0.json: not a Flight Recorder dump (entry 0 has no key 'profiling_name')"),
        (
            [{"profiling_name": "nccl:all_reduce", "input_sizes": 5, "output_sizes": [[4]], "collective_seq_id": 1}],
            "rank_0.json: not a Flight Recorder dump (entry 0: key 'input_sizes' holds int, expected list)",
        ),
        (
            [
                {
                    "profiling_name": "nccl:all_reduce",
                    "input_sizes": [[4]],
                    "output_sizes": [[4]],
                    "collective_seq_id": "1",
                }
            ],
            "rank_0.json: not a Flight Recorder dump (entry 0: key 'collective_seq_id' holds str, expected int)",
        ),
    ],
)
def test_bad_entries_refused_in_one_line(tmp_path, entries, why):
    (tmp_path / "rank_0.json").write_text(json.dumps({"version": "2.10", "pg_config": {}, "entries": entries}))
    (tmp_path / "rank_1.json").write_text(json.dumps({"version": "2.10", "pg_config": {}, "entries": []}))
    for path in (tmp_path / "rank_0.json", tmp_path):
        p = subprocess.run([os.path.join(BIN, "analyzer"), "check", str(path)], capture_output=True, text=True)
        assert p.returncode == 2 and p.stderr.strip() == f"error: {why}" and not p.stdout
