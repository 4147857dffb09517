"""The bottom layer every other one imports downward: ids and handles (`handles`), checkpoint
and restart options (`options`), why a checkpoint failed (`reasons`), what the pure core is
handed (`ports`: clock, timers), errors every layer raises (`errors`), shared metric types
(`histogram`, `task_metrics`), the debloating and slow-link settings (`debloat`, `links`) and
the fault-plan vocabulary (`fault_plan`). Imports no other project package."""
