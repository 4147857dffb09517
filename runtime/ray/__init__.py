"""The Ray executor: every task and the checkpoint coordinator run as Ray actors.

This package is the only place in barrierflow that imports `ray`. Entry point:
`runtime.ray.executor.run_job(graph, ...)`, which `env.execute(..., executor="ray")` calls.
"""
