"""The user's line first (#38 item 3): an op issued inside an installed framework names the
innermost frame of the program's own code, then the framework's line that issued it, in the
trace (user_frame, frame), in findings (console, JSON, HTML) and in diffs. The program's own
code is its project (code_paths.ProgramCode): a package of that project installed in editable
mode is the program's, a framework in site-packages is not. Expectations by hand from the
program's lines (tests/programs/framework_user/train.py, installed_fw/fakefw/ops.py)."""

import json
import os
import shutil
import subprocess

import pytest
from conftest import BIN, PROGRAMS, REPO, stream

from analyzer.checks import run_checks
from analyzer.loader import load
from traceformat.reader import read_trace
from tracer.capture.code_paths import ProgramCode, program_home, project_root


def _layout(tmp_path):
    """proj/ (pyproject.toml, train.py, src/projlib installed in editable mode through a .pth)
    and a site-packages folder holding the framework."""
    proj = tmp_path / "proj"
    shutil.copytree(os.path.join(PROGRAMS, "framework_user"), proj)
    (proj / "pyproject.toml").write_text('[project]\nname = "framework-user"\nversion = "0"\n')
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    shutil.copytree(os.path.join(PROGRAMS, "installed_fw", "fakefw"), site / "fakefw")
    (site / "_projlib.pth").write_text(str(proj / "src") + "\n")
    return proj, site


def _record(proj, site, out, *args):
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    res = record(
        RecordRequest(
            program=Program(script=str(proj / "train.py"), args=[str(site), *args]),
            world_size=4,
            out=str(out),
            mode="fake",
            progress=False,
        )
    )
    assert res.errors == {}


@pytest.fixture(scope="module")
def recorded_fw(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fw")
    proj, site = _layout(tmp)
    _record(proj, site, tmp / "bug.trace")
    _record(proj, site, tmp / "all.trace", "all")
    return tmp, proj


def test_trace_holds_the_users_line_and_the_frameworks(recorded_fw):
    tmp, proj = recorded_fw
    train = str(proj / "train.py")
    metrics = str(proj / "src" / "projlib" / "metrics.py")  # the project's own package, editable
    t = load(str(tmp / "bug.trace"))
    for rank in range(4):
        got = [(e["op"], e["user_frame"], e["frame"]) for e in stream(t, rank)]
        init = (
            "init_process_group",
            f"{train}:17 in <module>",
            f"{train}:17 in <module> via fakefw/ops.py:13 in __init__",
        )
        reduce = ("all_reduce", f"{metrics}:2 in sync_loss", f"{metrics}:2 in sync_loss via fakefw/ops.py:20 in reduce")
        gather = ("all_gather", f"{train}:22 in <module>", f"{train}:22 in <module> via fakefw/ops.py:7 in _gather_one")
        assert got == [init, reduce, gather, reduce, gather] if rank == 0 else [init, reduce, reduce]


def test_findings_name_the_users_line_then_the_frameworks(recorded_fw):
    tmp, proj = recorded_fw
    at = f"{proj / 'train.py'}:22 in <module> via fakefw/ops.py:7 in _gather_one"
    found = run_checks(load(str(tmp / "bug.trace"))).findings
    assert [(f.kind.name, f.culprit_ranks, f.seq, f.detail) for f in found] == [
        ("missing_collective", [0], 1, "extra"),
        ("missing_collective", [0], 2, "extra"),
    ]
    for f in found:
        assert f.frames == {0: at}
        assert f.message.startswith(f"rank 0 issued an extra all_gather on world (ranks 0-3) at {at}, before")
    p = subprocess.run(
        [os.path.join(BIN, "analyzer"), "check", str(tmp / "bug.trace"), "--json"], capture_output=True, text=True
    )
    assert p.returncode == 1
    assert [f["frames"] for f in json.loads(p.stdout)["findings"]] == [{"0": at}, {"0": at}]
    p = subprocess.run(
        [os.path.join(BIN, "analyzer"), "check", str(tmp / "bug.trace")],
        capture_output=True,
        text=True,
        env=dict(os.environ, COLUMNS="250"),
    )
    assert p.returncode == 1 and p.stdout.count(f"rank 0: {at}") == 2
    html = tmp / "report.html"
    p = subprocess.run([os.path.join(BIN, "analyzer"), "report", str(tmp / "bug.trace"), "-o", str(html)])
    assert p.returncode == 0
    assert html.read_text().count(at.replace("<", "&lt;").replace(">", "&gt;")) >= 2


def test_diff_names_the_users_line_then_the_frameworks(recorded_fw):
    tmp, _ = recorded_fw
    p = subprocess.run(
        [os.path.join(BIN, "analyzer"), "diff", str(tmp / "all.trace"), str(tmp / "bug.trace"), "--json"],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 1
    (div,) = json.loads(p.stdout)["divergences"]
    assert div["ranks"] == [1, 2, 3]
    # frames as the diff compares them: each file's name, so checkouts in other folders compare equal
    assert div["event_a"]["frame"] == "train.py:22 in <module> via ops.py:7 in _gather_one"
    assert div["event_b"]["frame"] == "metrics.py:2 in sync_loss via ops.py:20 in reduce"
    assert [r["where"]["frame"] for r in div["runs"]] == ["train.py:22 in <module> via ops.py:7 in _gather_one"] * 2


def test_the_programs_own_code_is_its_project_not_installed(tmp_path):
    proj, site = _layout(tmp_path)
    own = ProgramCode(str(proj / "train.py"))
    assert own.root == str(proj) + os.sep
    assert str(proj / "train.py") in own
    assert str(proj / "src" / "projlib" / "metrics.py") in own  # its own package, editable
    assert str(site / "fakefw" / "ops.py") not in own  # an installed framework
    venv = proj / ".venv" / "lib" / "python3.11" / "site-packages" / "accelerate" / "state.py"
    assert str(venv) not in own  # installed, even inside the project
    assert str(tmp_path / "megatron" / "core" / "parallel_state.py") not in own  # editable from elsewhere
    assert os.path.join(REPO, "tracer", "workloads", "train.py") in own  # plays the user's program
    assert os.path.join(REPO, "tracer", "capture", "recorder.py") not in own
    # a script in a folder of the project: the project is found upwards
    (proj / "scripts").mkdir()
    assert project_root(str(proj / "scripts" / "run.py")) == str(proj)
    # no marker above: the script's own folder
    loose = tmp_path / "loose" / "x"
    loose.mkdir(parents=True)
    assert project_root(str(loose / "t.py")) == str(loose)
    # a script inside an installed package, or no program at all: only the built-in workloads
    assert ProgramCode(str(site / "fakefw" / "ops.py")).root is None
    assert ProgramCode(None).root is None
    assert program_home(None, "json.decoder:JSONDecoder").endswith(os.path.join("json", "__init__.py"))
    assert program_home(None, "no_such_package_here.x:main") is None


def test_an_error_raised_inside_the_framework_names_the_users_line_and_keeps_every_line(tmp_path):
    from tracer.program import Program
    from tracer.record.pipeline import record
    from tracer.record.request import RecordRequest

    proj, site = _layout(tmp_path)
    res = record(
        RecordRequest(
            program=Program(script=str(proj / "train.py"), args=[str(site), "raise"]),
            world_size=4,
            out=str(tmp_path / "raise.trace"),
            mode="fake",
            progress=False,
        )
    )
    first = (
        "RuntimeError: Detected a disagreement on list length between rank0 and rank2 "
        f"({proj / 'train.py'}:24 in <module> via fakefw/ops.py:26 in assert_same_length)"
    )
    assert list(res.failures) == [2] and res.failures[2].why == first and res.failures[2].more == 2
    end = read_trace(res.path).ends[2]
    assert (end["error"], end["error_text"]) == (first, first + "\n  rank0: 3\n  rank2: 4")
