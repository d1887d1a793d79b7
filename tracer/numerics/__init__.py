"""`--numerics`: per step, digests of every module's output, gradient and parameter, and of the
loss (hooks.py), made of the global value from the ranks' shards (digests.py)."""
