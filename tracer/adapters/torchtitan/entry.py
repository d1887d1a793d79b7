"""What runs on every simulated rank: the installed TorchTitan trainer, set up for a CPU.

`tracer record --torchtitan MODULE:CONFIG` records `main` as its entrypoint, with the
arguments TorchTitan's own `torchtitan.train` takes: `--module M --config C` and the
`--section.key value` overrides (the adapter's CPU defaults first, the user's after, so the
user's win). Like `torchtitan.train.main`, it parses the config, builds the Trainer and trains;
unlike it, it also trains under `--comm.mode local_tensor` (TorchTitan 0.3 skips training
there) and feeds synthetic tokens.
"""

from __future__ import annotations

import os
import sys
import traceback


def main() -> None:
    from tracer.adapters.torchtitan import runtime

    runtime.prepare_rank()
    # the world size TorchTitan's fake_backend / local_tensor comm modes read, from the
    # torchrun environment every simulated rank has
    os.environ["NGPU"] = os.environ.get("WORLD_SIZE", "1")
    from torchtitan.config import ConfigManager

    from tracer.adapters.torchtitan import cpu_kernels, one_device_init, synthetic_data

    args, twin_of_dp = _twin_of_dp(sys.argv[1:])
    config = ConfigManager().parse_args(args)
    cpu_kernels.install_custom_ops()  # the ops of the modules `--override.imports` just loaded
    cpu_kernels.helion_rope_on_cpu(args)
    synthetic_data.install(config, twin_of_dp)
    try:
        trainer = config.build()
        cpu_kernels.install_custom_ops()  # the ops of the modules `--override.imports` loaded in build
        one_device_init.apply(trainer, config)
        try:
            trainer.train()
        finally:
            trainer.close()
    except BaseException:  # the rank's log keeps where in TorchTitan it failed; the trace, one line
        traceback.print_exc()
        raise


TWIN_FLAG = "--commtrace.twin_of_dp"
"""The adapter's own argument, last (plan.py adds it; TorchTitan's parser never sees it): the
numerics twin's dp degree ([tracer] twin_of_dp)."""


def _twin_of_dp(argv: list[str]) -> tuple[list[str], int]:
    if len(argv) >= 2 and argv[-2] == TWIN_FLAG:
        return argv[:-2], int(argv[-1])
    return argv, 0


if __name__ == "__main__":  # `python -m tracer.adapters.torchtitan.entry ARGS`: the same, unrecorded
    main()
