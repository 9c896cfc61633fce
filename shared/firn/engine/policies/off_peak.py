"""``OffPeak``: a policy wrapped in the table's ``compaction.major-window``.

Inside the window the wrapped policy plans as it always does. Outside it, the
partition is handed on marked ``off_peak``, and a policy that rewrites base (the
tiered one) holds its folds back to units at ``write.stall-runs``, merging runs
instead, and coalesces nothing: the costly rewrites wait for the quiet hours, reads
never wait past the stall limit. The clock is read here and nowhere else in
planning."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace

from firn.engine.policies.policy import CompactionPolicy, PartitionFiles
from firn.model.plans import PlanDraft
from firn.model.windows import Window


@dataclass(frozen=True)
class OffPeak:
    inner: CompactionPolicy
    window: Window

    def plan(self, partition: PartitionFiles) -> PlanDraft | None:
        now = partition.now or dt.datetime.now(dt.UTC)
        outside = not self.window.contains(now)
        return self.inner.plan(replace(partition, off_peak=outside))
