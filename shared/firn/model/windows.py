"""Off-peak windows (issue 15): ``compaction.major-window = "01:00-05:00"`` keeps the
services' folds (majors, fulls) inside a daily window, in UTC unless a zone follows
(``"22:00-04:00 Europe/Paris"``: a window may run past midnight). Merges of runs and
manual compactions run at any time; so does a fold of a unit whose sorted runs have
reached ``write.stall-runs``, since reads must not degrade without bound."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from firn.errors import ConfigError

_WINDOW = re.compile(r"(\d\d):(\d\d)-(\d\d):(\d\d)(?: ([A-Za-z0-9_+\-/]+))?")


@dataclass(frozen=True)
class Window:
    """A daily span of local times; ``start == end`` would be empty and is refused."""

    start: dt.time
    end: dt.time
    zone: str = "UTC"

    @classmethod
    def parse(cls, text: str) -> Window:
        match = _WINDOW.fullmatch(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise ConfigError(
                f"a window is 'HH:MM-HH:MM', optionally followed by a time zone "
                f"('01:00-05:00 Europe/Paris'), got {text!r}"
            )
        h1, m1, h2, m2, zone = match.groups()
        try:
            start, end = dt.time(int(h1), int(m1)), dt.time(int(h2), int(m2))
            ZoneInfo(zone or "UTC")
        except (ValueError, ZoneInfoNotFoundError) as exc:
            raise ConfigError(f"window {text!r}: {exc}") from exc
        if start == end:
            raise ConfigError(f"window {text!r} is empty: it starts where it ends")
        return cls(start, end, zone or "UTC")

    def contains(self, now: dt.datetime) -> bool:
        """Whether the aware instant ``now`` falls in the window (start inclusive)."""
        local = now.astimezone(ZoneInfo(self.zone)).time().replace(tzinfo=None)
        if self.start < self.end:
            return self.start <= local < self.end
        return local >= self.start or local < self.end  # past midnight

    def __str__(self) -> str:
        text = f"{self.start:%H:%M}-{self.end:%H:%M}"
        return text if self.zone == "UTC" else f"{text} {self.zone}"
