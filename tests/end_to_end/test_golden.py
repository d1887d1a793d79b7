"""CI guard for the comm patterns of the shipped examples: each one, recorded now, must diff
clean against its golden in traces/. On a change the failure message is the diff; if the
change is intended, run `tracer golden update` and commit traces/."""

import io
import os
import subprocess

import pytest
from conftest import BIN, REPO
from rich.console import Console

from analyzer.compare.diff import diff_traces
from analyzer.compare.normalize import Options
from analyzer.loader import load
from traceformat.golden import examples, write_golden
from tracer.record.golden import record_example

EXAMPLES = os.path.join(REPO, "examples")
TRACES = os.path.join(REPO, "traces")
ALL = examples(EXAMPLES)


def test_every_example_has_a_golden():
    # traces/torchtitan_*: recorded from TorchTitan itself, not from an example (test_torchtitan_match.py)
    goldens = {
        os.path.splitext(f)[0] for f in os.listdir(TRACES) if f.endswith(".trace") and not f.startswith("torchtitan_")
    }
    assert goldens == {name for name, _ in ALL}


def _diff_text(golden, trace, d) -> str:
    from analyzer.render import console

    buf = io.StringIO()
    console.diff(Console(file=buf, width=160, no_color=True), golden, trace, d)
    return buf.getvalue()


@pytest.mark.parametrize("name,path", ALL, ids=[n for n, _ in ALL])
def test_example_matches_its_golden(name, path, workload, tmp_path):
    if path.endswith(".toml"):
        trace, _ = workload(name)  # shared with the workload tests: recorded once per session
    else:
        out = str(tmp_path / f"{name}.trace")
        record_example(path, out, REPO)
        trace = load(out)
    golden = load(os.path.join(TRACES, name + ".trace"))
    d = diff_traces(golden, trace, Options.strict())  # a snapshot: group creation and names too
    assert d.equal, (
        f"comm pattern of examples/{os.path.basename(path)} changed against traces/{name}.trace "
        f"(if intended: tracer golden update):\n" + _diff_text(golden, trace, d)
    )


def test_goldens_are_canonical_and_portable(tmp_path):
    # re-recording writes the same bytes: no timestamps, creation time or absolute paths
    out = str(tmp_path / "fsdp.trace")
    record_example(os.path.join(EXAMPLES, "fsdp.toml"), out, REPO)
    write_golden(out, str(tmp_path / "golden.trace"), REPO)
    assert (tmp_path / "golden.trace").read_bytes() == open(os.path.join(TRACES, "fsdp.trace"), "rb").read()
    for name, _ in ALL:
        data = open(os.path.join(TRACES, name + ".trace"), "rb").read()
        assert REPO.encode() not in data and b"/home/" not in data
        t = load(os.path.join(TRACES, name + ".trace"))
        assert (t.events["ts"] == 0).all() and t.header["created"] == ""


def test_golden_cli_check_given_trace(tmp_path):
    # a changed comm pattern, given as a trace named like a golden: exit 1 and the diff printed
    analyzer = os.path.join(BIN, "analyzer")
    ok = subprocess.run(
        [analyzer, "golden", "check", os.path.join(TRACES, "fsdp.trace")], capture_output=True, text=True, cwd=REPO
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    swapped = tmp_path / "fsdp.trace"
    swapped.write_bytes(open(os.path.join(TRACES, "fsdp_tp.trace"), "rb").read())
    bad = subprocess.run([analyzer, "golden", "check", str(swapped)], capture_output=True, text=True, cwd=REPO)
    assert bad.returncode == 1 and "changed" in bad.stdout and "golden update" in bad.stdout
    missing = subprocess.run(
        [analyzer, "golden", "check", "--examples", str(tmp_path / "none")], capture_output=True, text=True, cwd=REPO
    )
    assert missing.returncode == 2 and missing.stderr.startswith("error:")
    # re-recording needs torch: that is the recorder's `tracer golden check`
    nothing = subprocess.run([analyzer, "golden", "check"], capture_output=True, text=True, cwd=REPO)
    assert nothing.returncode == 2 and "tracer golden check" in nothing.stderr


def test_tracer_golden_update_adopts_a_given_trace(tmp_path):
    # adopting the golden itself rewrites the same bytes (canonical is idempotent); check agrees
    tracer = os.path.join(BIN, "tracer")
    given = tmp_path / "fsdp.trace"
    given.write_bytes(open(os.path.join(TRACES, "fsdp.trace"), "rb").read())
    goldens = tmp_path / "goldens"
    p = subprocess.run(
        [tracer, "golden", "update", str(given), "--traces", str(goldens)], capture_output=True, text=True, cwd=REPO
    )
    assert p.returncode == 0 and p.stdout.startswith("written  fsdp"), p.stdout + p.stderr
    assert (goldens / "fsdp.trace").read_bytes() == given.read_bytes()
    assert sorted(os.listdir(goldens)) == ["fsdp.trace"]


def test_tracer_golden_check_records_and_compares(tmp_path):
    # one example in its own folder: recorded, then compared by `analyzer golden check`
    examples_dir = tmp_path / "examples"
    examples_dir.mkdir()
    (examples_dir / "fsdp.toml").write_text(open(os.path.join(EXAMPLES, "fsdp.toml")).read())
    tracer = os.path.join(BIN, "tracer")
    p = subprocess.run(
        [tracer, "golden", "check", "--examples", str(examples_dir), "--traces", TRACES],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert p.returncode == 0 and p.stdout.startswith("same     fsdp"), p.stdout + p.stderr
