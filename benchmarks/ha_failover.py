"""Coordinator failover time on Ray with a real ZooKeeper.

    python -m benchmarks.ha_failover [--runs 5] [--records 4000] [--session-timeout 2.0] [--json PATH]

Starts a standalone ZooKeeper (`checkpoint/io/zookeeper_server.py`) and one local Ray, then runs the page-view
job (parallelism 2, checkpoints every 50 ms, a map that sleeps 0.8 ms per record so the job lasts a
few seconds) with HA on and a `CoordinatorCrash` at 40 % of the source records: the driver
`ray.kill`s the leader coordinator actor. Failover time is from the kill to the end of the first
checkpoint completed by the new leader; it splits into the election wait (kill -> standby
promoted: the dead leader's ZooKeeper session must time out first) and the rest (global failover
of the tasks from the recovered checkpoint, then one checkpoint). Prints the runs and the median,
writes JSON.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import uuid
from typing import Any

from benchmarks.report import add_output_arguments, add_sized_argument, markdown_table, output_of, parse_args


def slow_app(record: dict[str, Any]) -> dict[str, Any]:
    time.sleep(0.0008)
    return {"app": record["app"]}


def build_graph(records: int, hosts: str, session_timeout: float) -> Any:
    from operators import CollectSink
    from runtime import StreamEnvironment
    from runtime.workloads.seeded import CountPerKey
    from vocabulary.options import RestartStrategy

    rng = random.Random(3)
    rows = [{"user": rng.randrange(1000), "app": f"app{rng.randrange(8)}", "i": i} for i in range(records)]
    env = StreamEnvironment(parallelism=2, buffer_size=64, credits=4, buffer_timeout=0.005)
    env.enable_checkpointing(interval=0.05, tolerable_failures=1000)
    env.set_restart_strategy(RestartStrategy.fixed_delay(attempts=10, delay=0.01))
    env.set_high_availability("zookeeper", hosts=hosts, cluster_id=f"bench-{uuid.uuid4().hex[:10]}",
                              session_timeout=session_timeout)
    (
        env.from_collection(rows, splits=2)
        .map(slow_app, name="to-app")
        .key_by("app")
        .process(CountPerKey("app"), name="count")
        .sink_to(CollectSink("pv"))
    )
    return env.get_job_graph("ha-failover")


def run_once(records: int, hosts: str, session_timeout: float) -> dict[str, Any]:
    from runtime import FaultPlan
    from runtime.ray.executor import RayExecutor
    from vocabulary.fault_plan import CoordinatorCrash

    executor = RayExecutor(build_graph(records, hosts, session_timeout),
                           faults=FaultPlan([CoordinatorCrash(at_fraction=0.4)]))
    result = executor.run()
    if not executor.coordinators.crash_times or not executor.coordinators.promotion_times:
        raise RuntimeError(f"no coordinator failover happened (failures: {result.failures})")
    killed = executor.coordinators.crash_times[0]
    after = [c.end_time for c in result.checkpoints if c.completed and c.trigger_time > killed]
    if not after:
        raise RuntimeError("the new leader completed no checkpoint: use more --records")
    return {
        "failover_s": round(min(after) - killed, 4),
        "election_s": round(executor.coordinators.promotion_times[0] - killed, 4),
        "recovered_checkpoint": executor.coordinators.recovered_checkpoints[0],
        "checkpoints_completed": sum(c.completed for c in result.checkpoints),
        "job_s": round(result.metrics.duration, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_arguments(parser, "ha_failover")
    add_sized_argument(parser, "--runs", full=5, quick=2, help="failovers measured")
    add_sized_argument(parser, "--records", full=4000, quick=1000, help="records per run")
    parser.add_argument("--session-timeout", type=float, default=2.0,
                        help="ZooKeeper session timeout, seconds (the server allows 0.4-60; default 2.0)")
    args = parse_args(parser, argv)
    from checkpoint.io.zookeeper_server import ZooKeeperServer
    from runtime.ray.cluster import ensure_ray

    ensure_ray()
    with ZooKeeperServer() as zk:
        runs = [run_once(args.records, zk.hosts, args.session_timeout) for _ in range(args.runs)]
    median = statistics.median(r["failover_s"] for r in runs)
    median_election = statistics.median(r["election_s"] for r in runs)
    table = markdown_table(runs)
    print(table)
    print(f"\nfailover (leader killed -> first checkpoint of the new leader), median of {len(runs)}: "
          f"{median:.3f} s (election wait {median_election:.3f} s; session timeout {args.session_timeout} s)")
    output_of(args, "ha_failover").write({"runs": runs, "median_failover_s": median, "median_election_s": median_election,
                                          "session_timeout_s": args.session_timeout, "records": args.records}, table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
