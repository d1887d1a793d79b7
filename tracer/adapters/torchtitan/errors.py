"""The adapter's one error type (its own module: job.py and version.py both raise it)."""


class TorchTitanError(ValueError):
    """Bad input for a TorchTitan job: one line, the CLI exits 2."""
