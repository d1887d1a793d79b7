"""Adapters: run a third-party trainer (as installed) on every simulated rank."""
