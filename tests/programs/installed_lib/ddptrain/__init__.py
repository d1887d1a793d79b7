"""A training library as users install it from pip (copied into a site-packages folder by
tests/test_attribution.py): the collectives it issues belong to its own lines."""
