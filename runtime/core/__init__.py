"""The protocol core (pure): barrier handlers, the input gate, the task and its parts
(operator chain, record writer, subtask checkpoints), partitioners, the job graph.
Imports nothing above it: no job master, executor, API or CLI; no ray/pyspark/kazoo.
"""
