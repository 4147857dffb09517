"""Suite-wide settings.

In CI (`CI` set) hypothesis runs derandomized: the same examples every run, so a landing is
never blocked by a new random draw; exploration with fresh random examples happens on
developer machines and in `python -m runtime.sim.vopr`, and every failure found there is kept
as an `@example`.
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
