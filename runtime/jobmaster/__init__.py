"""The executor-neutral job master (`master`), what it asks of an executor (`gateway`), the executor
registry (`registry`), what a run hands back (`result`), and one sub-package per concern: `faults`,
`restore`, `committer`, `coordination`, `lifecycle`."""
