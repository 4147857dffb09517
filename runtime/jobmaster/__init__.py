"""The executor-neutral job master (`master`), what it asks of an executor (`gateway`), and the
executor registry (`registry`)."""
