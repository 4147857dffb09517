"""Listing a local checkpoint directory without following symbolic links.

Theory of operation
-------------------
pyarrow's recursive listing of a local directory follows links to folders, so anything that
deletes what it lists (`barrierflow checkpoints gc`, the executors' orphan cleanup) would reach
files outside the checkpoint directory through a link someone put inside it. barrierflow never
creates a link, so below the storage base a link is foreign: it is reported, never entered, and a
delete whose path passes one is refused. The base itself may be reached through a link (`/tmp` is
one on some systems): only what lies below it is checked.
"""

from __future__ import annotations

import os


def walk(base: str, directory: str) -> tuple[list[str], list[str]]:
    """(files, links) below `base`/`directory`, as paths relative to `base` ('/'-separated). A link
    (to a file or a folder) is reported in `links` and not entered; when `directory` itself lies
    behind a link, that link is all there is.

    Raises:
        OSError: a folder could not be read (a missing one is empty).
    """
    directory = directory.strip("/")
    if directory:
        link = link_on_the_way(base, directory + "/-")
        if link is not None:
            return [], [link]
    files: list[str] = []
    links: list[str] = []
    pending = [f"{base}/{directory}".rstrip("/")]
    start = len(base) + 1
    while pending:
        folder = pending.pop()
        try:
            entries = os.scandir(folder)
        except (FileNotFoundError, NotADirectoryError):
            continue
        with entries:
            for entry in entries:
                if entry.is_symlink():
                    links.append(entry.path[start:])
                elif entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    files.append(entry.path[start:])
    return files, links


def link_on_the_way(base: str, path: str) -> str | None:
    """The first folder of `path` (relative to `base`) that is a symbolic link, or None."""
    parts = path.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        folder = "/".join(parts[:depth])
        if os.path.islink(f"{base}/{folder}"):
            return folder
    return None
