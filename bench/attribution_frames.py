"""What naming the user's line costs per recorded op: Attribution.frames() (the issuing frame and
the innermost frame of the program's own code) against stopping at the issuing frame, the walk
before the user frame existed, on the same stacks, interleaved in one process.

Stacks: the op's issuing frame (this file's, outside torch and commtrace: a library's) at the
bottom, and the program's line a few frames up (the program issued the op from a helper), `depth`
framework frames further up (Accelerate's gather is ~6, Lightning's Trainer ~30); and, the worst
case, a stack with no frame of the program at all (a config run of an installed workload),
walked to its bottom. Each is timed as the best of `repeats` batches of `n` calls, the two ways
in alternation; printed as microseconds per call and the ratio.

    python bench/attribution_frames.py [--n 20000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from tracer.capture.attribution import Attribution
from tracer.capture.code_paths import ProgramCode

_LIB = "def lib{i}(f):\n    return lib{j}(f)\n"


def _framework(folder: str, depth: int):
    """A chain of `depth` functions in a file under site-packages: lib0 calls lib1 ... calls f."""
    path = os.path.join(folder, "venv", "lib", "python3.11", "site-packages", "fw", "chain.py")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    src = "".join(_LIB.format(i=i, j=i + 1) for i in range(depth)) + f"def lib{depth}(f):\n    return f()\n"
    namespace: dict = {}
    exec(compile(src, path, "exec"), namespace)
    return namespace["lib0"]


def _program(folder: str, call):
    """A function of the program (a file of the project at `folder`) that calls `call`."""
    path = os.path.join(folder, "train.py")
    namespace: dict = {"call": call}
    exec(compile("def step(f):\n    return call(f)\n", path, "exec"), namespace)
    return namespace["step"], path


def _best(fn, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        open(os.path.join(tmp, "pyproject.toml"), "w").close()
        cases = []
        for depth in (0, 6, 30):
            chain = _framework(tmp, depth) if depth else (lambda f: f())
            step, script = _program(tmp, chain)
            cases.append((f"program line {depth} frames above the op", step, ProgramCode(script)))
        cases.append(("no program frame (walked to the bottom)", _framework(tmp, 30), ProgramCode(None)))
        print(f"{'stack':44} {'first frame':>12} {'both frames':>12} {'ratio':>7}")
        for name, outer, program in cases:
            att = Attribution(tmp, program)

            # the old walk: stop at the first frame outside torch / commtrace / stdlib
            def first_only(att=att):
                f = sys._getframe(0)
                known = att._user_code
                while f is not None:
                    where = known.get(id(f.f_code), 0)
                    if where == 0:
                        where = known[id(f.f_code)] = att._describe(f.f_code)
                    if isinstance(where, str):
                        return att._lines.get((id(f.f_code), f.f_lasti)) or where.format(f.f_lineno)
                    f = f.f_back
                return ""

            def both(att=att):
                return att.frames(sys._getframe(0))

            outer(both)  # caches warm, as after a recording's first steps
            a = b = float("inf")
            for _ in range(args.repeats):
                a = min(a, outer(lambda: _best(first_only, args.n)))
                b = min(b, outer(lambda: _best(both, args.n)))
            print(f"{name:44} {a * 1e6:10.2f}us {b * 1e6:10.2f}us {b / a:6.2f}x")


if __name__ == "__main__":
    main()
