"""What to break and when: the fault plan, its schedule for one run, what a fault does when it fires, storage wrappers that apply storage faults, and per-attempt fault counts."""
