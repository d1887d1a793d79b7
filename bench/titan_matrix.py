"""TorchTitan 0.3's own integration tests, recorded: the matrix of what commtrace makes of each.

    python bench/titan_matrix.py                      # every enabled test (hours on 2 cores)
    python bench/titan_matrix.py --only cp,hsdp       # these tests
    python bench/titan_matrix.py --suite features --skip-compile --json out.json

Each variant of each test in tests/torchtitan/titan_cases.py (transcribed from TorchTitan's
features / models / h100 lists) runs as a user would run it: `tracer record --torchtitan
MODULE:CONFIG -n NGPU -- OVERRIDES` with 2 steps (resume variants: their steps / 5), short
sequences (64 tokens; 256 x the CP degree with context parallel, TorchTitan's load-balancer
rule), ranks 0 and NGPU-1 recorded (the ranks they wait on run too), the variants of one test
sharing its dump folder (checkpoint save, then load); then `analyzer check`. Status per variant:
  clean     recorded, no findings
  findings  recorded, `analyzer check` found something (exit 1)
  refused   `tracer record` said no in one line (exit 2): the cause is that line
  failed    a rank failed (exit 1): its first real error
A test disabled in TorchTitan's own CI is listed as `disabled` and not run (--include-disabled runs it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "torchtitan"))

from titan_cases import CASES, Case, degrees, split_job, tokens, with_typechecking  # noqa: E402

BIN = os.path.dirname(sys.executable)


def _steps(toks: list[str]) -> tuple[list[str], int]:
    """The variant without its --training.steps, and the steps to record: 2, or a given
    count / 5 (a resume variant's 20 after a saving variant's 10 stays one step pair later)."""
    out, steps = [], 2
    i = 0
    while i < len(toks):
        t = toks[i]
        if t == "--training.steps" and i + 1 < len(toks):
            steps = max(1, int(toks[i + 1]) // 5)
            i += 2
            continue
        out.append(t)
        i += 1
    return out, steps


def command(case: Case, k: int, dump: str, out: str) -> list[str]:
    """The `tracer record` command of variant k of `case`."""
    toks = with_typechecking(case, tokens(case.variants[k], dump), case.ngpu)
    spec, rest = split_job(toks, case.module, case.config)
    rest, steps = _steps(rest)
    d = degrees(rest, case.ngpu)
    small = ["--training.steps", str(steps), "--training.seq_len", str(256 * d["cp"] if d["cp"] > 1 else 64)]
    if not any(t.startswith("--training.local_batch_size") for t in rest):
        small += ["--training.local_batch_size", "2"]
    n = case.ngpu
    ranks = "0" if n == 1 else f"0,{n - 1}"
    opts = rest + small + ["--dump_folder", dump]  # subcommand tokens: the adapter orders them (job.py)
    return [
        os.path.join(BIN, "tracer"),
        "record",
        "--torchtitan",
        spec,
        "-n",
        str(n),
        "--ranks",
        ranks,
        "-o",
        out,
        "--",
        *opts,
    ]


def _first_error(text: str) -> str:
    for ln in text.splitlines():
        if ln.startswith("error:"):
            return ln.removeprefix("error:").strip()
    tail = [ln for ln in text.splitlines() if ln.strip()]
    return tail[-1] if tail else ""


def run_variant(case: Case, k: int, work: str, timeout: float) -> dict:
    dump = os.path.join(work, case.name.replace("/", "_"))
    os.makedirs(dump, exist_ok=True)
    out = os.path.join(dump, f"v{k}.trace")
    cmd = command(case, k, dump, out)
    start = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "detail": f"over {timeout:g} s", "seconds": timeout, "cmd": cmd}
    secs = round(time.time() - start, 1)
    text = p.stdout + p.stderr
    if p.returncode == 2 and not _first_error(text).startswith(("rank ", "ranks ")):
        return {"status": "refused", "detail": _first_error(text), "seconds": secs, "cmd": cmd}
    if p.returncode != 0:
        return {"status": "failed", "detail": _first_error(text), "seconds": secs, "cmd": cmd}
    c = subprocess.run([os.path.join(BIN, "analyzer"), "check", out, "--json"], capture_output=True, text=True)
    if c.returncode == 0:
        return {"status": "clean", "detail": "", "seconds": secs, "cmd": cmd}
    try:
        findings = json.loads(c.stdout).get("findings", [])
        kinds = sorted({f.get("kind", "?") for f in findings})
        detail = f"{len(findings)} finding(s): {', '.join(kinds)}"
    except (ValueError, AttributeError):
        detail = _first_error(c.stdout + c.stderr)
    return {"status": "findings" if c.returncode == 1 else "failed", "detail": detail, "seconds": secs, "cmd": cmd}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated test names")
    ap.add_argument("--suite", default="", help="features, models or h100")
    ap.add_argument("--exclude", default="", help="comma-separated test names to leave out")
    ap.add_argument("--skip-compile", action="store_true", help="leave out tests with --compile.enable")
    ap.add_argument("--include-disabled", action="store_true")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per variant")
    ap.add_argument("--json", default="", help="write the rows here too")
    ap.add_argument("--work", default="", help="folder for traces and dump folders (default: a temporary one)")
    args = ap.parse_args(argv)
    only = {n for n in args.only.split(",") if n}
    exclude = {n for n in args.exclude.split(",") if n}
    work = args.work or tempfile.mkdtemp(prefix="titan-matrix-")
    rows = []
    for case in CASES:
        if (only and case.name not in only) or case.name in exclude or (args.suite and case.suite != args.suite):
            continue
        compiled = any("compile.enable" in " ".join(v) and "no-enable" not in " ".join(v) for v in case.variants)
        for k in range(len(case.variants)):
            row = {"suite": case.suite, "test": case.name, "variant": k, "ngpu": case.ngpu}
            if case.disabled and not args.include_disabled:
                row.update(status="disabled", detail=case.disabled, seconds=0)
            elif args.skip_compile and compiled:
                row.update(status="skipped", detail="--skip-compile", seconds=0)
            else:
                row.update(run_variant(case, k, work, args.timeout))
            rows.append(row)
            print(
                f"{row['suite']:8} {row['test']:45} v{k} n={row['ngpu']} {row['status']:9} "
                f"{row['seconds']:>7} s  {row['detail']}",
                flush=True,
            )
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("counts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "counts": counts}, f, indent=1)
    return 0 if not counts.get("failed") and not counts.get("findings") and not counts.get("timeout") else 1


if __name__ == "__main__":
    sys.exit(main())
