"""The checkpoint-modes benchmark's targets: each compares modes on the mechanism it is about.

* slow-channel p99: aligned >= 2x unaligned and >= 2x at-least-once. One upstream subtask's
  barriers arrive late while the job has headroom; aligned checkpoints block the other channels
  until they do, the other modes never block.
* backpressure duration: unaligned checkpoint duration p50 <= 1/10 of aligned (unaligned
  barriers overtake the in-flight data aligned ones queue behind).
* debloating under backpressure: aligned-debloat checkpoint duration p50 >= 5x shorter than
  aligned, unaligned-debloat persisted bytes per checkpoint >= 5x smaller than unaligned, each
  costing <= 5 % throughput (the backpressure throughput runs checkpoint at an interval every mode
  keeps up with, so a mode is not charged for completing more checkpoints).
* uniform cost: aligned throughput within 10 % of no checkpointing.

Each line says met / NOT met and why, in numbers: the verdict and its explanation come from the
same figures (an explanation never claims what the figures do not show), and a line whose rows
were measured on a contended machine (`contended`: a load above the core count) says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

EXECUTORS = ("sim", "ray")

#: (target name, printed line, met)
Check = tuple[str, str, bool]


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")


def target_checks(rows: Sequence[dict[str, Any]]) -> list[Check]:
    """The targets these rows can answer, in a fixed order; a target whose rows are missing (or
    failed) is left out."""
    checks: list[Check] = []
    for executor in EXECUTORS:
        used: list[dict[str, Any]] = []

        def get(scenario: str, mode: str, name: str, executor: str = executor,
                used: list[dict[str, Any]] = used) -> Any:
            for row in rows:
                if (row["executor"], row["scenario"], row["mode"]) == (executor, scenario, mode):
                    used.append(row)
                    return row.get(name)
            return None

        for check in (_slow_channel, _backpressure_duration, _debloat_duration, _debloat_persisted,
                      _debloat_throughput, _uniform_cost):
            used.clear()
            found = check(executor, get)
            if found is not None:
                name, line, ok = found
                checks.append((name, line + _contention(used), ok))
    return checks


def _contention(rows: Sequence[dict[str, Any]]) -> str:
    """" [contended: ...]" when a row a target read was measured at a load above the core count."""
    marked = {(r["scenario"], r["mode"]): r for r in rows if r.get("contended")}
    if not marked:
        return ""
    worst = max(marked.values(), key=lambda r: r.get("load_average") or 0)
    return (f" [contended: {len(marked)} of its rows measured at a load above the core count (up to "
            f"{worst.get('load_average', '?')} on {worst.get('cores', '?')} cores): other processes' work is in "
            "these figures]")


Getter = Callable[..., Any]


def _slow_channel(executor: str, get: Getter) -> Check | None:
    p99 = {m: get("slow-channel", m, "latency_p99") for m in ("aligned", "unaligned", "at-least-once")}
    if any(v is None for v in p99.values()):
        return None
    vs_u, vs_a = _ratio(p99["aligned"], p99["unaligned"]), _ratio(p99["aligned"], p99["at-least-once"])
    ok = vs_u >= 2 and vs_a >= 2
    align = {m: get("slow-channel", m, "alignment_time_p50") or 0.0 for m in p99}
    why = (f"alignment p50 per checkpoint: aligned {align['aligned']:.1f} ms, unaligned {align['unaligned']:.1f} ms, "
           f"at-least-once {align['at-least-once']:.1f} ms")
    return (f"{executor} slow-channel p99",
            f"{executor} slow-channel: latency p99 aligned {p99['aligned']:.1f} ms = {vs_u:.1f}x unaligned "
            f"({p99['unaligned']:.1f} ms), {vs_a:.1f}x at-least-once ({p99['at-least-once']:.1f} ms) "
            f"(target >= 2x both: {_verdict(ok)}; {why})", ok)


def _backpressure_duration(executor: str, get: Getter) -> Check | None:
    aligned = get("backpressure", "aligned", "checkpoint_duration_p50")
    unaligned = get("backpressure", "unaligned", "checkpoint_duration_p50")
    if not aligned or unaligned is None:
        return None
    ratio = unaligned / aligned
    ok = ratio <= 0.1
    persisted = {m: get("backpressure", m, "persisted_bytes_p50") or 0 for m in ("unaligned", "aligned")}
    why = (f"in-flight data persisted per checkpoint (p50): unaligned {persisted['unaligned']:,.0f} B, aligned "
           f"{persisted['aligned']:,.0f} B")
    return (f"{executor} backpressure duration",
            f"{executor} backpressure: unaligned/aligned checkpoint duration p50 = {unaligned:.2f}/{aligned:.2f} ms "
            f"= {ratio:.3f} (target <= 0.1: {_verdict(ok)}; {why})", ok)


def _debloat_duration(executor: str, get: Getter) -> Check | None:
    plain = get("backpressure", "aligned", "checkpoint_duration_p50")
    debloated = get("backpressure", "aligned-debloat", "checkpoint_duration_p50")
    if not plain or not debloated:
        return None
    ratio = plain / debloated
    ok = ratio >= 5
    size = get("backpressure", "aligned-debloat", "debloated_buffer_size")
    why = f"input buffers debloated to {size:,} records" if size is not None else "no buffer was debloated"
    return (f"{executor} debloat duration",
            f"{executor} backpressure: aligned checkpoint duration p50 {plain:.1f} ms -> {debloated:.1f} ms with "
            f"debloating = {ratio:.1f}x shorter (target >= 5x: {_verdict(ok)}; {why})", ok)


def _debloat_persisted(executor: str, get: Getter) -> Check | None:
    plain = get("backpressure", "unaligned", "persisted_bytes_p50")
    debloated = get("backpressure", "unaligned-debloat", "persisted_bytes_p50")
    if not plain or debloated is None:
        return None
    ratio = _ratio(plain, debloated)
    ok = ratio >= 5
    size = get("backpressure", "unaligned-debloat", "debloated_buffer_size")
    why = f"input buffers debloated to {size:,} records" if size is not None else "no buffer was debloated"
    return (f"{executor} debloat persisted",
            f"{executor} backpressure: unaligned persisted bytes per checkpoint p50 {plain:,.0f} -> {debloated:,.0f} "
            f"with debloating = {ratio:.1f}x smaller (target >= 5x: {_verdict(ok)}; {why})", ok)


def _debloat_throughput(executor: str, get: Getter) -> Check | None:
    costs, listed = {}, []
    for mode in ("aligned", "unaligned"):
        plain = get("backpressure", mode, "throughput")
        debloated = get("backpressure", f"{mode}-debloat", "throughput")
        if plain and debloated:
            costs[mode] = 1 - debloated / plain
            listed.append(f"{mode} {plain:,.0f} -> {debloated:,.0f} rec/s (cost {costs[mode]:.1%})")
    if not costs:
        return None
    worst = max(costs, key=lambda m: costs[m])
    ok = costs[worst] <= 0.05
    return (f"{executor} debloat throughput",
            f"{executor} backpressure: throughput with debloating {', '.join(listed)} "
            f"(target cost <= 5%: {_verdict(ok)}; the larger cost, {worst}'s, is {costs[worst]:.1%}; throughput "
            "runs at equal checkpoint rates)", ok)


def _uniform_cost(executor: str, get: Getter) -> Check | None:
    none = get("uniform", "none", "throughput")
    aligned = get("uniform", "aligned", "throughput")
    if not none or not aligned:
        return None
    cost = 1 - aligned / none
    ok = cost <= 0.10
    p99 = {m: get("uniform", m, "latency_p99") for m in ("none", "aligned")}
    why = ("latency p99 none " + " / aligned ".join("-" if p99[m] is None else f"{p99[m]:,.1f} ms"
                                                     for m in ("none", "aligned")))
    return (f"{executor} uniform cost",
            f"{executor} uniform: aligned/none throughput = {aligned:,.0f}/{none:,.0f} rec/s = {aligned / none:.3f} "
            f"(cost {cost:.1%}; target cost <= 10%: {_verdict(ok)}; {why})", ok)


def targets(rows: Sequence[dict[str, Any]], runs: Sequence[Sequence[dict[str, Any]]] = ()) -> list[str]:
    """The target lines for `rows`; with `runs` (every combination's per-repeat rows) each line
    also says in how many repeats the target was met, judged on the rows of that repeat alone (a
    combination run once counts in every repeat)."""
    lines = []
    repeats = max((len(r) for r in runs), default=1)
    per_repeat = [{name: met for name, _, met in target_checks([r[min(i, len(r) - 1)] for r in runs])}
                  for i in range(repeats)] if repeats > 1 else []
    for name, line, _ in target_checks(rows):
        verdicts = [checks[name] for checks in per_repeat if name in checks]
        if verdicts:
            line += f" [medians of {repeats} repeats; met in {sum(verdicts)} of {len(verdicts)} repeats]"
        lines.append(line)
    return lines
