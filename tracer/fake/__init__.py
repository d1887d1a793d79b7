"""Fake mode's machinery (a process per rank, nothing communicated): the channel between the rank
processes and what travels on it (values the program's control flow reads: object collectives,
a pipeline stage's vote), and compute-free recording (`--compute fake`, FakeTensorMode)."""
