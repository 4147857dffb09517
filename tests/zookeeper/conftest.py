"""Fixtures for tests against a real ZooKeeper 3.8 server (started once per session, never skipped)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from kazoo.client import KazooClient  # noqa: E402
from zk_helpers import new_client  # noqa: E402

from checkpoint.io.zookeeper_server import ZooKeeperServer  # noqa: E402


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(data_dir=tmp_path_factory.mktemp("zookeeper"))
    server.start()  # a RuntimeError here fails every test that needs the server: never a skip
    yield server
    server.stop()


@pytest.fixture
def make_client(zk_server: ZooKeeperServer) -> Iterator[Callable[..., KazooClient]]:
    clients: list[KazooClient] = []

    def make(**kwargs) -> KazooClient:
        client = new_client(zk_server.hosts, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()
        client.close()


@pytest.fixture
def zk_client(make_client: Callable[..., KazooClient]) -> KazooClient:
    return make_client()


@pytest.fixture
def cluster_id() -> str:
    """A fresh `/barrierflow/<cluster_id>` subtree per test, so tests never see each other's znodes."""
    return f"test-{uuid.uuid4().hex[:12]}"
