"""How simulated ranks run: `fake` (a process per rank), `local` (LocalTensorMode, one process)
and `real` (a process per rank on real gloo)."""

MODES = {"fake": "fake_backend", "local": "local_tensor"}  # CLI name -> TorchTitan's [comm] mode name
OTHER_MODES = "--mode real (every rank's real values) or --mode fake (the comm pattern)"
"""What a local-mode refusal offers instead: both modes run a process per rank."""

ALIASES = {"fake": "fake", "fake_backend": "fake", "local": "local", "local_tensor": "local", "real": "real"}
