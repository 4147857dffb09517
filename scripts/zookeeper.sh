#!/usr/bin/env bash
# Start, stop or query a standalone ZooKeeper 3.8 server without systemd.
#   scripts/zookeeper.sh start|stop|status [DATA_DIR] [PORT]
# Defaults: DATA_DIR=${TMPDIR:-/tmp}/barrierflow-zookeeper, PORT=2181.
# The server listens on 127.0.0.1 only; its PID is in DATA_DIR/zookeeper.pid, its log in
# DATA_DIR/zookeeper.log. Needs java and /usr/share/java/zookeeper.jar
# (apt-get install -y zookeeper).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
exec "${PYTHON:-python3}" -m checkpoint.io.zookeeper_server "$@"
