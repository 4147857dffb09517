"""The run's checkpoint coordinators: their succession, the state each starts with, and how tasks learn of completed checkpoints."""
