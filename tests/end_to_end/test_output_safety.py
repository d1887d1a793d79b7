"""Nothing lost: every command that writes refuses an output that is one of its inputs (one
line, exit 2, the file untouched), and writes through a temp file renamed into place."""

import hashlib
import os
import shutil

import pytest
from conftest import REPO, one_line_error, program
from conftest import run_tracer as run

from traceformat.output import OutputError, atomic_open, atomic_path, refuse_inputs

GOLDEN = os.path.join(REPO, "traces", "fsdp.trace")


def digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def work(tmp_path):
    shutil.copy(GOLDEN, tmp_path / "a.trace")
    shutil.copy(program("rank_branch"), tmp_path / "train.py")
    os.link(tmp_path / "a.trace", tmp_path / "hard.trace")
    os.symlink("a.trace", tmp_path / "soft.trace")
    (tmp_path / "sub").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    "args",
    [
        ["tracer", "merge", "a.trace", "-o", "a.trace"],
        ["tracer", "merge", "soft.trace", "-o", "./sub/../a.trace"],  # same file by another path
        ["tracer", "replay", "a.trace", "-o", "a.trace"],
        ["tracer", "record", "--script", "train.py", "-n", "2", "-o", "train.py"],
        ["analyzer", "export", "a.trace", "-o", "a.trace"],
        ["analyzer", "export", "a.trace", "-o", "hard.trace"],  # a hard link: same inode
        ["analyzer", "export", "a.trace", "--format", "json", "-o", "soft.trace"],
        ["analyzer", "report", "a.trace", "-o", "a.trace"],
        ["analyzer", "report", "hard.trace", "--diff", "a.trace", "-o", "a.trace"],
        ["analyzer", "hang", "a.trace", "--dot", "a.trace"],
    ],
)
def test_output_that_is_an_input_is_refused(work, args):
    before = {p: digest(work / p) for p in ("a.trace", "train.py")}
    p = run(*args, cwd=work)
    assert p.returncode == 2, p.stderr
    line = one_line_error(p)
    assert "is also an input" in line and len(p.stderr.strip().splitlines()) == 1
    assert {p: digest(work / p) for p in before} == before
    assert sorted(os.listdir(work)) == ["a.trace", "hard.trace", "soft.trace", "sub", "train.py"]


def test_golden_update_refuses_its_own_golden(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    shutil.copy(GOLDEN, traces / "fsdp.trace")
    before = digest(traces / "fsdp.trace")
    p = run(
        "tracer",
        "golden",
        "update",
        str(traces / "fsdp.trace"),
        "--examples",
        os.path.join(REPO, "examples"),
        "--traces",
        str(traces),
        cwd=tmp_path,
    )
    assert p.returncode == 2 and "is also an input" in one_line_error(p)
    assert digest(traces / "fsdp.trace") == before


def test_parts_folder_holding_the_script_is_refused(tmp_path):
    (tmp_path / "out.trace.parts").mkdir()
    shutil.copy(program("rank_branch"), tmp_path / "out.trace.parts" / "train.py")
    p = run("tracer", "record", "--script", "out.trace.parts/train.py", "-n", "2", "-o", "out.trace", cwd=tmp_path)
    assert p.returncode == 2 and "holds an input" in one_line_error(p)
    assert (tmp_path / "out.trace.parts" / "train.py").exists()


def test_merge_writes_a_new_file_and_keeps_the_old_on_failure(work):
    p = run("tracer", "merge", "a.trace", "-o", "m.trace", cwd=work)
    assert p.returncode == 0, p.stderr
    (work / "bad.part").write_bytes(b"\x00not a trace")
    before = digest(work / "m.trace")
    p = run("tracer", "merge", "a.trace", "bad.part", "-o", "m.trace", cwd=work)
    assert p.returncode == 2
    assert digest(work / "m.trace") == before
    assert not [n for n in os.listdir(work) if n.endswith(".tmp")]


def test_atomic_path_replaces_only_on_success(tmp_path):
    out = tmp_path / "x.json"
    out.write_text("good")
    with pytest.raises(RuntimeError):
        with atomic_open(out) as f:
            f.write("half")
            raise RuntimeError("failed midway")
    assert out.read_text() == "good" and os.listdir(tmp_path) == ["x.json"]
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(out) as tmp:
            open(tmp, "w").write("half")
            raise KeyboardInterrupt
    assert out.read_text() == "good" and os.listdir(tmp_path) == ["x.json"]
    with atomic_open(out) as f:
        f.write("new")
    assert out.read_text() == "new" and os.listdir(tmp_path) == ["x.json"]
    assert oct(os.stat(out).st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_refuse_inputs_folder_and_inside(tmp_path):
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "rank_00000.part").write_bytes(b"x")
    with pytest.raises(OutputError, match="is also an input"):
        refuse_inputs(tmp_path / "p" / "rank_00000.part", [tmp_path / "p"])
    with pytest.raises(OutputError, match="is also an input"):
        refuse_inputs(tmp_path / "p" / "new.trace", [tmp_path / "p"])
    with pytest.raises(OutputError, match="is a folder"):
        refuse_inputs(tmp_path / "p", [])
    refuse_inputs(tmp_path / "other.trace", [tmp_path / "p", None, tmp_path / "nope"])
