"""Verification on the simulator: swarm testing, shrinking, the VOPR-style runner.
"""
