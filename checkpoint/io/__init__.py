"""Checkpoint storage and high availability: blob stores and the checkpoint layout, completed-
checkpoint stores, cleanup and tools, recovery modes, ZooKeeper (the only kazoo import),
the simulator's in-memory HA services, and the files a task snapshot is written as.
"""
