"""Who waits for whom, by concern: semantics.py (what blocks: keys, Blocked, the op kinds),
replay.py (the step-by-step Python replay of a dry run: the tests' reference), advance.py (the
same, columnar, any trace), settle.py (the same in fewer rounds, where the ordering certificate
holds), certificate.py (the certificate), frontier.py (where a stopped run's ranks were stuck,
post-mortem), graph.py (wait-for graphs and their cycles)."""
