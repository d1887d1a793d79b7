"""Real mode's machinery: a process per rank on a real gloo backend of this CPU (backend.py),
over one store that every rank process of the recording shares (install)."""
