"""Hooks that see collectives, p2p, groups, meshes and DTensor redistributions (needs torch)."""
