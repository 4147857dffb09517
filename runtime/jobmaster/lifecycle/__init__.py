"""A run's lifecycle around the protocol: the restart strategy, the progress watchdog and the progress reports."""
