"""What to break and when: a fault plan's schedule for one run (the plan: `vocabulary.fault_plan`), what a fault
does when it fires, storage wrappers that apply storage faults, and per-attempt fault counts."""
