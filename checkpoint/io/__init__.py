"""Checkpoint storage and high availability where they touch the outside world: the blob store on
`pyarrow.fs` filesystems and `storage_from_uri`, cleanup and tools, leases, recovery modes,
ZooKeeper (the only kazoo import), the simulator's in-memory HA services, and the files a task
snapshot is written as. The layout, stores and formats they use are pure, in `checkpoint.storage`.
"""
