"""`tracer replay`: re-issue a recorded comm pattern on a real backend. driver.py plans each
rank's events (torch-free) and runs one process per rank; ops.py is what each of those
processes runs (torch): the groups recreated, the events issued, the replay itself recorded."""
