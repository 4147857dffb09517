"""Checkpoint storage, pure: the `BlobStore` port and the in-memory store (`blob_stores`), the
`chk-<id>` layout and checksums (`layout.CheckpointStorage`), completed-checkpoint stores
(`store`), the file formats of keyed state and of the durable committer (`keyed_files`,
`committer_files`) and the storage errors (`errors`). `checkpoint/io/` implements the port on
real filesystems (`FsBlobStore`, `storage_from_uri`) and holds the HA services, leases and tools."""
