"""The README is a guide that stays true: short, every command in it runs as shown, every link
in it and in docs/ resolves.

Convention (README.md, "A 10-minute tour"): every fenced block tagged `sh` or `bash` is run, line
by line (a trailing `\\` continues a line), in order, in one scratch copy of the examples,
goldens and test programs, with this interpreter's tools first on the PATH. A line's trailing
comment may say `exit N` (default: 0) and `prints: TEXT` (TEXT must appear in its output,
whitespace folded). `make TARGET` lines are not run (CI runs `make lint`, `make test` and
`make test-frameworks` themselves): the target must exist (`make -n TARGET`). A block that
cannot run here (it needs a cluster) is marked on the line above its fence:
`<!-- readme-test: skip (why) -->`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO

README = Path(REPO) / "README.md"
DOCS = Path(REPO) / "docs"
MAX_LINES = 250
RUN_LANGS = {"sh", "bash"}
SKIP = re.compile(r"<!--\s*readme-test:\s*skip\s*\((?P<why>[^)]+)\)\s*-->")
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\s*$")
# copied into the scratch folder: what the tour's commands read
INPUTS = ("examples", "traces", "tests/programs", "tests/flight_recorder")


@dataclass(kw_only=True, slots=True)
class Block:
    lang: str
    """The fence's info string ("" for none)."""
    lines: list[str]
    """The block's text, one entry per line."""
    line: int
    """1-based line of the opening fence in README.md."""
    skip: str | None
    """Why the block is not run (its skip marker), or None."""


@dataclass(kw_only=True, slots=True)
class Command:
    text: str
    """The shell command, continuation lines joined, comment removed."""
    exit: int
    """The exit status the README states (0 unless the comment says `exit N`)."""
    prints: str | None
    """Text the README says the output holds (`prints: ...`), or None."""
    line: int
    """1-based README line where the command starts."""


def fenced_blocks(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            i += 1
        assert i < len(lines), f"README.md:{start + 1}: fence never closed"
        prev = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        marker = SKIP.search(prev)
        blocks.append(
            Block(lang=m["lang"], lines=lines[start + 1 : i], line=start + 1, skip=marker["why"] if marker else None)
        )
        i += 1
    return blocks


def commands(block: Block) -> list[Command]:
    out: list[Command] = []
    pending, first = "", 0
    for n, raw in enumerate(block.lines, start=block.line + 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if not pending:
            first = n
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        full, pending = pending + line, ""
        m = re.match(r"(?P<code>.*?)(?:\s+#\s(?P<comment>.*))?$", full)
        assert m is not None
        code, comment = m["code"], m["comment"] or ""
        status = re.search(r"\bexit (\d+)", comment)
        prints = re.search(r"\bprints: (.+)$", comment)
        out.append(
            Command(
                text=code.strip(),
                exit=int(status[1]) if status else 0,
                prints=prints[1].strip() if prints else None,
                line=first,
            )
        )
    assert not pending, f"README.md:{first}: a command ends in a continuation"
    return out


def readme_commands() -> list[Command]:
    blocks = [b for b in fenced_blocks(README.read_text()) if b.lang in RUN_LANGS and b.skip is None]
    return [c for b in blocks for c in commands(b)]


def test_readme_is_a_short_guide():
    text = README.read_text()
    n = len(text.splitlines())
    assert n <= MAX_LINES, f"README.md is {n} lines (at most {MAX_LINES}: reference material goes to docs/)"
    for heading in ("## Two commands", "## A 10-minute tour", "## Exit codes", "## Where next"):
        assert heading in text, heading


def test_parser_reads_the_convention():
    block = Block(
        lang="sh",
        lines=["# a comment", "tracer record x \\", "    -o y.trace   # exit 1, prints: two  words", "", "ls"],
        line=10,
        skip=None,
    )
    got = [(c.text, c.exit, c.prints, c.line) for c in commands(block)]
    assert got == [("tracer record x -o y.trace", 1, "two  words", 12), ("ls", 0, None, 15)]
    text = "x\n<!-- readme-test: skip (needs a cluster) -->\n```bash\nrm -rf /\n```\n```sh\nls\n```\n"
    assert [(b.lang, b.skip, b.lines) for b in fenced_blocks(text)] == [
        ("bash", "needs a cluster", ["rm -rf /"]),
        ("sh", None, ["ls"]),
    ]


def test_every_shell_block_runs_or_says_why_not():
    langs = {b.lang for b in fenced_blocks(README.read_text())}
    assert not langs & {"shell", "console", "zsh", "shell-session"}, "tag shell blocks sh or bash: they are run"
    ran = readme_commands()
    # the tour's steps are all there: a parser that dropped them would pass everything
    subcommands = {tuple(c.text.split()[:2]) for c in ran}
    for step in [
        ("tracer", "record"),
        ("make", "demo"),
        ("make", "test"),
        ("python", "tests/flight_recorder/make_dumps.py"),
    ]:
        assert step in subcommands, step
    for sub in ("check", "diff", "hang", "summary", "report"):
        assert ("analyzer", sub) in subcommands, sub
    assert any(c.exit == 1 for c in ran), "the tour shows a bug: some command exits 1"


def test_make_targets_exist():
    targets = [c.text.split()[1] for c in readme_commands() if c.text.split()[0] == "make"]
    assert {"demo", "test"} <= set(targets)
    for target in targets:
        r = subprocess.run(["make", "-n", target], cwd=REPO, capture_output=True, text=True)
        assert r.returncode == 0, f"make -n {target}: {r.stderr}"


def _torch_lines(tmp_path, *args: str) -> list[str]:
    """The pip lines `make` would run to set up a fresh .venv with the frameworks (a dry run of
    `make test-frameworks`, whose set-up is make test's and then the frameworks')."""
    venv = tmp_path / "venv"
    cmd = ["make", "-n", f"VENV={venv}", *args, "test-frameworks"]
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return [line for line in r.stdout.splitlines() if "pip install" in line and "--upgrade pip" not in line]


def test_torch_index_applies_to_the_torch_line_only(tmp_path):
    """README, "Two commands": `make TORCH_INDEX=... test` installs PyTorch's CPU wheel; the
    default leaves pip's configured index alone. The lines after torch's (the project, then the
    frameworks `make test-frameworks` records) never take that index."""
    torch_line, *others = _torch_lines(tmp_path)
    assert torch_line.endswith("pip install -q torch==2.13.0") and others
    assert not any("index-url" in line for line in others)
    cpu = "https://download.pytorch.org/whl/cpu"
    assert f"make TORCH_INDEX={cpu} test" in README.read_text()
    torch_line, project_line, *frameworks = _torch_lines(tmp_path, f"TORCH_INDEX={cpu}")
    assert torch_line.endswith(f"pip install -q torch==2.13.0 --index-url {cpu}")
    assert "-c constraints-cpu.txt" in project_line and "'.[frameworks]'" in frameworks[0]
    assert not any("index-url" in line for line in (project_line, *frameworks))


def test_tour_runs_as_shown(tmp_path):
    work = tmp_path / "tour"
    for rel in INPUTS:
        shutil.copytree(Path(REPO) / rel, work / rel, ignore=shutil.ignore_patterns("__pycache__", "*.parts"))
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("COLUMNS", None)  # as in a CI log: not a terminal
    ran = 0
    for c in readme_commands():
        if c.text.split()[0] == "make":
            continue  # test_make_targets_exist; CI runs the make targets itself
        r = subprocess.run(
            c.text, shell=True, executable="/bin/bash", cwd=work, env=env, capture_output=True, text=True, timeout=300
        )
        output = r.stdout + r.stderr
        where = f"README.md:{c.line}: {c.text}\n{output[-3000:]}"
        assert r.returncode == c.exit, f"exit {r.returncode}, README says {c.exit}: {where}"
        if c.prints:
            assert " ".join(c.prints.split()) in " ".join(output.split()), f"no {c.prints!r} in the output: {where}"
        ran += 1
    assert ran >= 10


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    in_code = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not line.startswith("#"):
            continue
        slug = _slug(line.lstrip("#"))
        k = seen.get(slug, 0)
        seen[slug] = k + 1
        out.add(slug if k == 0 else f"{slug}-{k}")
    return out


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # links in code are not links
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = LINK.findall(text)
    for target in targets:
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{page.name}: link to {target}: no such file"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{page.name}: link to {target}: no such heading in {dest.name}"
    if page == README:
        assert len(targets) >= 8  # the README links to every page of docs/
