"""Local mode's machinery (LocalTensorMode: one Python runs every rank): the collectives it
answers itself (ops), the program's rank per simulated rank (rank_values, rank_reads,
rank_branch), generators and plain tensors per rank (rng, plain), FSDP2 under LocalTensor (fsdp)."""
