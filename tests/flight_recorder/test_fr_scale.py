"""Reading dumps at scale (issue 39): the C reader gives the dict reader's columns and runs
nothing; `hang` from each group's frontier gives the verdict of the whole history; missing and
truncated dumps; -j. Dumps: the peer corpus (hand-derived verdicts), bench/fr_scale_synth.py
(torch's own pickle bytes, a seeded hang whose truth the generator knows) and bench/fr_synth.py
(Python's pickler)."""

import json
import os
import pickle
import shutil
import sys

import numpy as np
import pytest
from conftest import HERE, REPO

from analyzer.hang import analyze
from analyzer.loader import LoadError, load
from analyzer.sources.flight_recorder import rank, scanned
from analyzer.sources.flight_recorder.options import ReadOptions
from analyzer.sources.flight_recorder.read import dump_files

sys.path.insert(0, os.path.join(REPO, "bench"))
sys.path.insert(0, os.path.join(HERE, "flight_recorder"))
import corpus  # noqa: E402
import fr_scale_synth  # noqa: E402
from fr_synth import dump, groups  # noqa: E402

needs_c = pytest.mark.skipif(not scanned.available(), reason="the C reader is not built")


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("fr_corpus")
    corpus.write(str(out))
    return out


@pytest.fixture(scope="module")
def hang_dir(tmp_path_factory):
    """48 ranks (dp 6 x tp 8) x 300 entries, rank 21 stalled before a tp all-reduce, ranks 3 and
    7 without a dump, rank 38's dump cut in half (the seed picks them)."""
    out = tmp_path_factory.mktemp("fr_hang") / "dumps"
    truth = fr_scale_synth.generate(str(out), 48, 300, stall=21, missing=2, truncated=1, jobs=1, seed=3)
    return out, truth


def _same(a, b) -> None:
    assert (a.rank, a.version, a.config, a.error) == (b.rank, b.version, b.config, b.error)
    for k in ("sites", "pgs", "shapes", "dtypes", "states"):
        assert getattr(a, k) == getattr(b, k), k
    assert a.cols.keys() == b.cols.keys()
    for k in a.cols:
        assert np.array_equal(a.cols[k], b.cols[k]), k


def _dict_reader(monkeypatch):
    monkeypatch.setattr(scanned, "_frscan", None)


def test_c_reader_is_built_where_a_compiler_is():
    # pip install builds it (pyproject's ext-modules; optional only where no compiler exists)
    if shutil.which("cc") or shutil.which("gcc"):
        assert scanned.available()


@needs_c
def test_c_reader_gives_the_dict_readers_columns(corpus_dir, hang_dir, tmp_path, monkeypatch):
    config, mine = groups(16)
    synth = tmp_path / "synth"
    synth.mkdir()
    for r in range(16):  # Python's pickler, every protocol that has the binary opcodes
        d = pickle.loads(dump(r, 16, 64, config, mine[r]))
        (synth / f"rank_{r}").write_bytes(pickle.dumps(d, protocol=2 + r % 4))
    files = dump_files(str(corpus_dir)) + dump_files(str(hang_dir[0])) + dump_files(str(synth))
    files = [f for f in files if f[1] == "pickle"]
    fast = [rank.read_rank(f) for f in files]
    assert sum(d.error is None for d in fast) >= len(files) - 1  # the truncated one
    _dict_reader(monkeypatch)
    for f, d in zip(files, fast):
        _same(d, rank.read_rank(f))


@needs_c
def test_c_reader_decodes_values_and_interns_them():
    d = {
        "version": "2.10",
        "pg_status": {"0": {"last_completed_collective": 3}},
        "entries": [
            {
                "record_id": i,
                "collective_seq_id": 2**40 + i,
                "profiling_name": "nccl:all_reduce",
                "frames": [{"name": "f", "filename": "/x/y.py", "line": 3}],
                "input_sizes": [[4, i % 2]],
                "is_p2p": False,
                "duration_ms": 1.5,
            }
            for i in range(6)
        ],
    }
    for protocol in (2, 3, 4, 5):
        s = scanned.scan(pickle.dumps(d, protocol=protocol))
        assert s is not None and s.n == 6 and s.root == {"version": "2.10", "pg_status": d["pg_status"]}
        assert s.ints["collective_seq_id"].tolist() == [2**40 + i for i in range(6)]
        assert s.ints["pg_id"].tolist() == [scanned.MISSING] * 6
        assert s.ids["input_sizes"].tolist() == [0, 1, 0, 1, 0, 1]  # two distinct shapes, built once each
        assert s.tables["input_sizes"] == [[[4, 0]], [[4, 1]]]
        # the first entry spells its frame's strings out, the later ones refer to them: two
        # spellings, one value, each built once
        frames = s.tables["frames"]
        assert len(frames) == 2 and frames[0] == frames[1] == [{"name": "f", "filename": "/x/y.py", "line": 3}]
        assert s.ids["frames"].tolist() == [0, 1, 1, 1, 1, 1]


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch /tmp/commtrace-fr-scale-pwned",))


@needs_c
def test_a_pickle_that_names_a_callable_is_given_up_and_refused(tmp_path):
    marker = "/tmp/commtrace-fr-scale-pwned"
    if os.path.exists(marker):
        os.remove(marker)
    evil = {"version": "2.10", "entries": [{"profiling_name": "nccl:all_reduce", "x": _Boom()}]}
    data = pickle.dumps(evil, protocol=2)
    assert scanned.scan(data) is None  # the C reader has no opcode that calls anything
    (tmp_path / "rank_0").write_bytes(data)
    with pytest.raises(LoadError, match="refused"):
        load(tmp_path)
    assert not os.path.exists(marker)


def _verdict(report):
    return (
        [(f.kind.name, f.culprit_ranks, f.message) for f in report.findings],
        {r: (b.key, b.waits_for) for r, b in report.stuck.items()},
    )


def _root_causes(report):
    """The verdict without the dump numbers a message ends with (fr_numbers lists the entries
    of every p2p pair at the finding's seq: a window of one instance leaves out other pairs')."""
    return (
        [
            (f.kind.name, f.culprit_ranks, f.ranks, f.waiting_ranks, f.message.split(" [dump numbers")[0])
            for f in report.findings
        ],
        {r: (b.key, b.waits_for) for r, b in report.stuck.items()},
    )


@pytest.mark.parametrize("case", sorted(corpus.cases()))
def test_hang_from_the_frontier_is_the_whole_historys_verdict(corpus_dir, case):
    full = analyze(load(corpus_dir / case))
    assert _verdict(analyze(load(corpus_dir / case, fr=ReadOptions(frontier=True)))) == _verdict(full)
    # the least history (each rank's last op on each group): windows cut right at the frontier
    assert _root_causes(analyze(load(corpus_dir / case, fr=ReadOptions(frontier=True, context=0)))) == _root_causes(
        full
    )


def test_seeded_hang_stalled_and_missing_ranks(hang_dir):
    """The generator's truth: rank 21 stalled (its tp peers wait in the all-reduce it never
    entered), ranks 3 and 7 left no dump, rank 38's file is cut in half (skipped, missing)."""
    folder, truth = hang_dir
    assert truth == {"stalled": 21, "stall_at": 501, "missing": [3, 7], "truncated": [38]}
    t = load(folder, fr=ReadOptions(frontier=True))
    report = analyze(t)
    stalled = [f for f in report.findings if f.kind.name == "stalled_rank"]
    assert 21 in {r for f in stalled for r in f.culprit_ranks}
    # its tp peers wait in the all-reduce, its dp peers (ranks = 5 mod 8) in the reduce-scatter
    # two ops on, which it never reached either
    peers = (set(range(16, 24)) | {5, 13, 29, 37, 45}) - {21}
    assert {r for r, b in report.stuck.items() if 21 in b.waits_for} == peers
    named = {r for f in report.findings for r in f.culprit_ranks}
    assert {3, 7, 38} <= named and named <= {3, 7, 21, 38}
    assert any("nccl_trace_rank_38" in n and n.startswith("skipped") for n in t.notes)
    assert _verdict(report) == _verdict(analyze(load(folder)))


def test_frontier_window_keeps_little(hang_dir):
    folder, _ = hang_dir
    t = load(folder, fr=ReadOptions(frontier=True, context=4))
    full = load(folder)
    assert t.n_events < full.n_events / 10
    assert any(n.startswith("hang: read from each group's frontier") for n in t.notes)


def test_jobs_give_the_same_trace(hang_dir, monkeypatch):
    from analyzer.sources.flight_recorder import load as dumps

    folder, _ = hang_dir
    one = load(folder, fr=ReadOptions(jobs=1))
    window = load(folder, fr=ReadOptions(jobs=1, frontier=True))
    monkeypatch.setattr(dumps, "PARALLEL_FROM", 1)
    assert load(folder, fr=ReadOptions(jobs=2)).events.equals(one.events)
    # hang's two-phase read: the windows cut in the worker processes that hold the dumps
    assert load(folder, fr=ReadOptions(jobs=3, frontier=True)).events.equals(window.events)
    assert window.n_events < one.n_events


def test_cli_hang_jobs_and_full_history(hang_dir, tmp_path):
    import subprocess

    folder, _ = hang_dir
    outs = []
    for extra in ([], ["--full-history"], ["-j", "1"]):
        p = subprocess.run(
            [sys.executable, "-m", "analyzer", "hang", str(folder), "--json", *extra],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        assert p.returncode == 1, p.stderr
        outs.append(json.loads(p.stdout)["findings"])
    assert outs[0] == outs[1] == outs[2]
    p = subprocess.run(
        [sys.executable, "-m", "analyzer", "hang", str(folder), "-j", "0"], capture_output=True, text=True
    )
    assert p.returncode == 2 and p.stderr.startswith("error: -j 0") and "Traceback" not in p.stderr


def test_a_dump_cut_short_anywhere_is_skipped_and_named(hang_dir, tmp_path):
    """A rank killed while writing its dump: whatever length is left, the file is skipped with a
    note (never refused as unsafe, never a traceback) and the rank counts as missing."""
    folder, _ = hang_dir
    data = (folder / "nccl_trace_rank_0").read_bytes()
    for cut in (3, 100, len(data) // 3, len(data) - 1):
        (tmp_path / "nccl_trace_rank_0").write_bytes(data[:cut])
        (tmp_path / "nccl_trace_rank_1").write_bytes((folder / "nccl_trace_rank_1").read_bytes())
        if scanned.available():
            assert scanned.scan(data[:cut]) is None
        t = load(tmp_path)
        assert t.ranks == [1] and any(n.startswith("skipped nccl_trace_rank_0") for n in t.notes), t.notes


@needs_c
def test_c_reader_on_damaged_dumps_agrees_with_the_restricted_unpickler():
    """Seeded byte flips, cuts and splices of a torch-format dump and of a Python protocol-4 one:
    the C reader never crashes, and whatever it decodes is what the restricted unpickler reads
    from the same bytes (it gives up on the rest, which the unpickler then reads or refuses)."""
    import io
    import random

    from analyzer.sources.flight_recorder.read import SafeUnpickler

    torch_bytes = fr_scale_synth.dump_bytes(9, 48, "realistic", 12, 520, 515)  # 12 entries
    python_bytes = pickle.dumps(pickle.loads(torch_bytes), protocol=4)
    rng = random.Random(39)
    decoded = 0
    for base in (torch_bytes, python_bytes):
        for _ in range(150):
            data = bytearray(base)
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(len(data))
                if rng.random() < 0.7:
                    data[i] = rng.randrange(256)
                else:
                    data[i : i + rng.randint(1, 40)] = b""
            s = scanned.scan(bytes(data))
            try:
                want = SafeUnpickler(io.BytesIO(bytes(data))).load()
            except Exception:
                want = None
            if s is None:
                continue
            assert isinstance(want, dict) and isinstance(want.get("entries"), list)
            decoded += 1
            entries = want["entries"]
            assert s.n == len(entries) and s.root == {k: v for k, v in want.items() if k != "entries"}
            for key in scanned.OBJ_KEYS:
                got = [s.tables[key][i] if i >= 0 else "absent" for i in s.ids[key].tolist()]
                assert got == [e.get(key, "absent") for e in entries], key
            for key in scanned.INT_KEYS:
                v = s.ints[key].tolist()
                exp = [e.get(key, "absent") for e in entries]
                for g, e in zip(v, exp):
                    if e == "absent":
                        assert g == scanned.MISSING
                    elif e is None:
                        assert g == scanned.NONE
                    elif isinstance(e, int):
                        assert g == int(e), key
    assert decoded >= 10  # flips inside values and names still decode: compared, not just skipped
