"""Suite-wide settings and fixtures.

In CI (`CI` set) hypothesis runs derandomized: the same examples every run, so a landing is
never blocked by a new random draw; exploration with fresh random examples happens on
developer machines and in `python -m runtime.verify.vopr`, and every failure found there is kept
as an `@example`.
"""

import os
import sys
from concurrent.futures import Executor, Future

import pytest
from hypothesis import settings
from resource_markers import needs_serial, needs_slow, unmarked_resource_uses

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


class HeldExecutor(Executor):
    """Runs submitted jobs only when told: what a slow I/O thread looks like to a store."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Future, object]] = []

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        self.jobs.append((future, lambda: fn(*args, **kwargs)))
        return future

    def run_all(self) -> None:
        jobs, self.jobs = self.jobs, []
        for future, job in jobs:
            try:
                future.set_result(job())
            except BaseException as exc:
                future.set_exception(exc)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: the `slow` added here counts
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test using a real component's fixture without its marker is a collection error; every
    test marked for a real component is also `slow` (`scripts/test.sh --fast` leaves it out) and
    `serial` (the full run runs it alone, after the tests that share the cores)."""
    unmarked = unmarked_resource_uses(items)
    if unmarked:
        raise pytest.UsageError("tests that start a real component need its marker:\n" + "\n".join(unmarked))
    for item in items:
        if needs_slow(item):
            item.add_marker(pytest.mark.slow)
        if needs_serial(item):
            item.add_marker(pytest.mark.serial)


@pytest.fixture(autouse=True)
def _ray_needs_its_marker(request: pytest.FixtureRequest):
    """A test that starts Ray in this process without `@pytest.mark.ray` fails (so `-m "not ray"`
    and the fast tier never start Ray)."""
    running_before = _ray_running()
    yield
    if not running_before and _ray_running() and request.node.get_closest_marker("ray") is None:
        pytest.fail(f"{request.node.nodeid} started Ray but is not marked @pytest.mark.ray", pytrace=False)


def _ray_running() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


@pytest.fixture
def held_executor() -> HeldExecutor:
    return HeldExecutor()


@pytest.fixture
def silent_port():
    """A TCP port on 127.0.0.1 that accepts connections and never answers (an endpoint that
    hangs); its connections are closed when the test ends."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    server.settimeout(0.1)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            accepted.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=5)
    server.close()
    for conn in accepted:
        conn.close()


@pytest.fixture
def closed_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on (connections are refused at once)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# One local Spark and one local Ray for the whole test run, whichever directory needs them (Spark
# for the bridge and the NexMark oracle, Ray for the Ray executor; the oracle needs both). If one
# cannot start, every test using it FAILS with the reason: these tests are never skipped.

_SPARK_START_ERROR: list[BaseException] = []


@pytest.fixture(scope="session")
def spark():
    """`spark_bridge.local_session`: `local[2]`, on 127.0.0.1 only, UI off, 2 shuffle partitions."""
    if _SPARK_START_ERROR:
        pytest.fail(f"local Spark could not start: {_SPARK_START_ERROR[0]!r}", pytrace=False)
    try:
        from spark_bridge.io.session import local_session

        session = local_session("barrierflow-tests", cores=2, memory="1g",
                                config={"spark.sql.shuffle.partitions": "2"})
        session.sparkContext.setLogLevel("ERROR")
    except Exception as exc:  # noqa: BLE001 - any start failure must fail the tests loudly
        _SPARK_START_ERROR.append(exc)
        pytest.fail(f"local Spark (pyspark, Java 17) could not start: {exc!r}", pytrace=False)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def ray_session():
    """The embedded local Ray, as users get it (`runtime.ray.cluster.ensure_ray`)."""
    import ray

    from runtime.ray.cluster import ensure_ray

    try:
        ensure_ray()
    except Exception as exc:  # pragma: no cover - environment failure
        pytest.fail(f"could not start a local Ray for the Ray tests: {exc!r}", pytrace=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def no_idle_workers(ray_session):
    """`ray_session` with no idle worker or service actor kept from an earlier test's jobs
    (`runtime.ray.worker_pool`): the test's first job starts its own; it leaves none either.
    Yields the idle workers (`IDLE_WORKERS`)."""
    from runtime.ray.worker_pool import IDLE_SERVICES, IDLE_WORKERS

    def kill_idle() -> None:
        for actor in IDLE_WORKERS.clear() + IDLE_SERVICES.clear():
            ray_session.kill(actor, no_restart=True)

    kill_idle()
    yield IDLE_WORKERS
    kill_idle()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's S3 server on 127.0.0.1 for the session (`tests/s3_server.py`), stopped by its PID;
    the session's environment carries the credentials it accepts. Fails — never skips — when it
    cannot start."""
    from s3_server import S3Server, S3StartError, restore_environment, set_credentials

    server = S3Server(tmp_path_factory.mktemp("moto"))
    try:
        server.start()
    except S3StartError as exc:
        pytest.fail(f"the S3 tests need moto's S3 server: {exc}", pytrace=False)
    previous = set_credentials()
    yield server
    server.stop()
    restore_environment(previous)


@pytest.fixture
def s3_bucket(s3_server) -> str:
    """A new, empty bucket on the session's S3 server (one per test)."""
    return s3_server.create_bucket()
