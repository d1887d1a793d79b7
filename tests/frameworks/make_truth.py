"""Write tests/frameworks/truth/CASE.json: each rank's (op, dtype, numel) sequence of a real gloo
run (`tracer record --mode real`) of each healthy framework program: the truth the fake-mode
recordings in test_frameworks.py are held to. Rerun after a framework upgrade (minutes a case):

    DS_ACCELERATOR=cpu python tests/frameworks/make_truth.py [CASE ...] [--from-traces DIR]

--from-traces DIR takes DIR/CASE.trace (real-mode traces recorded beforehand) instead of recording.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile

from fw_cases import HEALTHY, HERE, env, pattern, tracer_command

from analyzer.loader import load


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*", default=list(HEALTHY))
    parser.add_argument("--from-traces")
    args = parser.parse_args()
    for case in args.cases:
        _, program, prog_args = HEALTHY[case]
        if args.from_traces:
            path = os.path.join(args.from_traces, case + ".trace")
        else:
            path = os.path.join(tempfile.mkdtemp(), case + ".trace")
            subprocess.run(tracer_command(program, prog_args, "real", path), env=env(program), check=True)
        trace = load(path)
        assert trace.header["mode"] == "real", path
        truth = {str(r): pattern(trace, r) for r in range(trace.header["world_size"])}
        with open(os.path.join(HERE, "truth", case + ".json"), "w") as f:
            json.dump(truth, f, separators=(",", ":"))
            f.write("\n")
        print(case, {r: len(s) for r, s in truth.items()})


if __name__ == "__main__":
    main()
