"""Verification on the simulator: the per-event invariant checker, swarm testing, shrinking, the
VOPR-style runner.
"""
