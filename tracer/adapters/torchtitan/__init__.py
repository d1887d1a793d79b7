"""The installed TorchTitan trainer on every simulated rank, on CPU: entry.py runs a rank,
request.py builds the RecordRequest."""
