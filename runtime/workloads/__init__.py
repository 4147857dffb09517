"""Demo, test and benchmark jobs built with the public API (above it, outside the executors).

`seeded`: seeded random jobs and the order checks of property tests, swarm and VOPR runs;
`scenarios`: named simulator scenarios (backpressure, relay); `pageview`: the demo's page-view count.
"""
