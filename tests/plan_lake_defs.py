"""The planning benchmark's lake (`benchmarks.plan_lake`, 1,000 partitions per asset) as a code
location for `partlake`: the tables live under `$PLAN_LAKE_ROOT`."""

from __future__ import annotations

import os

from benchmarks.plan_lake import Layout, build_defs

defs = build_defs(Layout(1000), os.environ["PLAN_LAKE_ROOT"], None)
