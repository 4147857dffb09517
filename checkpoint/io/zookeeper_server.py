"""Start and stop a standalone ZooKeeper 3.8 server without systemd (tests, benchmarks, the shell).

Theory of operation: `ZooKeeperServer.start()` writes a `zoo.cfg` into the data directory (client
port bound to 127.0.0.1, admin server off, the `ruok`/`srvr`/`stat`/`mntr`/`cons` four-letter words
allowed, a 200 ms tick so sessions can be as short as 400 ms, and as long as 60 s by default:
above every client's default, which ZooKeeper would otherwise lower without a word), launches
`java ... org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg` in its own process group with
its output in `<data_dir>/zookeeper.log`, records the PID in `<data_dir>/zookeeper.pid`, and
polls `ruok` and `srvr` until the server answers `imok` and reports its mode (it serves
sessions), or the deadline passes. `stop()` sends SIGTERM to
that PID, then SIGKILL after a grace period. The data directory survives `stop()`, so a
`restart()` on the same port and directory keeps every persistent znode.

Every failure to start is a `RuntimeError` naming what failed (java missing, jar missing, port
busy, early exit with the log tail, timeout), never a silent skip.

Command line (used by `scripts/zookeeper.sh`)::

    python -m checkpoint.io.zookeeper_server start|stop|status [DATA_DIR] [PORT]
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_JAR = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
INSTALL_HINT = "install with: apt-get install -y zookeeper"
DEFAULT_PORT = 2181
DEFAULT_DIR = Path(tempfile.gettempdir()) / "barrierflow-zookeeper"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def four_letter_word(port: int, word: str, timeout: float = 1.0) -> str:
    """Send a four-letter command (`ruok`, `srvr`, ...) and return the reply ('' if none)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def _is_zookeeper(pid: int) -> bool:
    """Guards against stopping an unrelated process that reused a stale PID."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return MAIN_CLASS.encode() in cmdline


class ZooKeeperServer:
    """One standalone ZooKeeper server on 127.0.0.1.

    Args:
        port: client port; None picks a free one.
        data_dir: where `zoo.cfg`, the snapshots, the log and the PID file go; None makes a
            temporary directory (removed by `cleanup()`).
        tick_time_ms: ZooKeeper's tick; the shortest session is 2 ticks.
        max_session_timeout: the longest session, in seconds. A client asking for more gets
            this much (the server negotiates it down), so it is above the HA default
            (`checkpoint.io.recovery.DEFAULT_SESSION_TIMEOUT`, 10 s).
        start_timeout: seconds `start()` waits for the server to serve.
    """

    def __init__(self, port: int | None = None, data_dir: str | os.PathLike[str] | None = None, *,
                 tick_time_ms: int = 200, max_session_timeout: float = 60.0, start_timeout: float = 30.0,
                 heap: str = "256m") -> None:
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"ZooKeeper port must be in 1..65535, got {port}")
        if tick_time_ms <= 0:
            raise ValueError(f"tick_time_ms must be > 0, got {tick_time_ms}")
        if not max_session_timeout * 1000 >= 2 * tick_time_ms:
            raise ValueError(f"max_session_timeout must be at least two ticks ({2 * tick_time_ms / 1000:g} s), "
                             f"got {max_session_timeout!r}")
        self.port = port if port is not None else free_port()
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="zk-")) if data_dir is None else Path(data_dir)
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout = max_session_timeout
        self.start_timeout = start_timeout
        self.heap = heap
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def hosts(self) -> str:
        """Connection string for `KazooClient(hosts=...)`."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / "zookeeper.pid"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def pid(self) -> int | None:
        """PID of the running server (from this object or the PID file), else None."""
        if self._process is not None and self._process.poll() is None:
            return self._process.pid
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _pid_alive(pid) and _is_zookeeper(pid) else None

    def is_running(self) -> bool:
        """Whether the server serves requests.

        `ruok` alone is not enough: ZooKeeper answers `imok` as soon as it accepts connections,
        about a second before it serves sessions (clients connecting then are dropped). `srvr`
        reports `Mode:` only once it serves.
        """
        return four_letter_word(self.port, "ruok") == "imok" and "Mode:" in four_letter_word(self.port, "srvr")

    def write_config(self) -> Path:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "zoo.cfg"
        config.write_text(
            f"dataDir={self.data_dir / 'data'}\n"
            f"clientPort={self.port}\n"
            "clientPortAddress=127.0.0.1\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat,mntr,cons\n"
            f"tickTime={self.tick_time_ms}\n"
            f"minSessionTimeout={2 * self.tick_time_ms}\n"
            f"maxSessionTimeout={round(self.max_session_timeout * 1000)}\n"
        )
        return config

    def start(self) -> ZooKeeperServer:
        """Launch the server and wait until it serves (`ruok` -> `imok` and `srvr` shows its mode).

        Raises:
            RuntimeError: java or the ZooKeeper jar is missing, the port is busy, the server
                exited early (the message carries the end of its log), or it did not start
                serving within `start_timeout` seconds (it is then stopped).
        """
        if self.pid is not None:
            raise RuntimeError(f"ZooKeeper already running in {self.data_dir} (pid {self.pid})")
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("cannot start ZooKeeper: `java` is not on PATH "
                               "(install with: apt-get install -y default-jre-headless)")
        if not ZOOKEEPER_JAR.exists():
            raise RuntimeError(f"cannot start ZooKeeper: {ZOOKEEPER_JAR} is missing ({INSTALL_HINT})")
        if _port_in_use(self.port):
            raise RuntimeError(f"cannot start ZooKeeper: port {self.port} on 127.0.0.1 is busy")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self.write_config()
        classpath = f"{ZOOKEEPER_JAR}:{SLF4J_JAR}" if SLF4J_JAR.exists() else str(ZOOKEEPER_JAR)
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen(
                [java, f"-Xmx{self.heap}", "-cp", classpath, MAIN_CLASS, str(config)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=self.data_dir, start_new_session=True,
            )
        self.pid_file.write_text(f"{self._process.pid}\n")
        self._await_ready()
        return self

    def _await_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with code {self._process.returncode} while starting "
                                   f"on port {self.port}; log {self.log_file}:\n{self._log_tail()}")
            if self.is_running():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"ZooKeeper on port {self.port} did not start serving (`ruok`/`srvr`) within "
                           f"{self.start_timeout} s; log {self.log_file}:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace: float = 5.0) -> None:
        """Stop the server by PID: SIGTERM, then SIGKILL after `grace` seconds. Idempotent."""
        pid = self.pid
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while _pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            if _pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=grace)
            self._process = None
        with contextlib.suppress(FileNotFoundError):
            self.pid_file.unlink()

    def restart(self) -> ZooKeeperServer:
        """Stop, then start on the same port and data directory (persistent znodes survive)."""
        self.stop()
        return self.start()

    def cleanup(self) -> None:
        """Stop, and remove the data directory if this object created it."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        return f"ZooKeeperServer(hosts={self.hosts!r}, data_dir='{self.data_dir}', pid={self.pid})"


def main(argv: list[str] | None = None) -> int:
    """`start|stop|status [DATA_DIR] [PORT]`; exit code 0 on success, 1 otherwise."""
    args = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: python -m checkpoint.io.zookeeper_server start|stop|status [DATA_DIR] [PORT]"
    if not args or args[0] not in ("start", "stop", "status") or len(args) > 3:
        print(usage, file=sys.stderr)
        return 2
    command = args[0]
    data_dir = Path(args[1]) if len(args) > 1 else DEFAULT_DIR
    try:
        port = int(args[2]) if len(args) > 2 else DEFAULT_PORT
    except ValueError:
        print(f"PORT must be an integer, got {args[2]!r}\n{usage}", file=sys.stderr)
        return 2
    server = ZooKeeperServer(port, data_dir)
    if command == "start":
        try:
            server.start()
        except RuntimeError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        # Detach: the server must outlive this process.
        server._process = None
        print(f"ZooKeeper started: hosts={server.hosts} pid={server.pid} dir={data_dir}")
        return 0
    if command == "stop":
        was_running = server.pid is not None
        server.stop()
        print("ZooKeeper stopped" if was_running else f"ZooKeeper not running in {data_dir}")
        return 0
    pid = server.pid
    if pid is not None and server.is_running():
        print(f"ZooKeeper running: hosts={server.hosts} pid={pid} dir={data_dir}")
        return 0
    print(f"ZooKeeper not running (dir={data_dir}, port={port})")
    return 1


if __name__ == "__main__":
    sys.exit(main())
