"""Verification: the per-event invariant checker, swarm testing on the simulator and on a real
Ray (`ray_swarm`, `ray_phases`) with their shared judging, shrinking, the VOPR-style runner.
"""
