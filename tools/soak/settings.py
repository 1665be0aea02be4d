"""The soak's settings: its paces, timings, chaos and sizes, and the deadlines derived from them."""

from __future__ import annotations

from dataclasses import dataclass

from .actor_controls import Pace
from .truth import ADMISSION, TAG

# Calm publishers move rows between all three kinds every few seconds; hot ones flip a few rows
# admission <-> tag back to back, so that some move is in flight whenever a sweep reads its references.
CALM = Pace(tick_s=0.4, rows_held=6, moves_per_row=(1, 6))
HOT = Pace(tick_s=0.05, rows_held=1, moves_per_row=(40, 200), kinds=(ADMISSION, TAG), switch_kind=True)
# Hot rows that hop between all three kinds every 0.2-0.5 s, manifests included (written by rename,
# removed by unlink or retire, no fence), each move inside an admission: many hops per sweep.
HOT_HOPS = Pace(tick_s=0.35, rows_held=1, moves_per_row=(30, 120), switch_kind=True, fenced_manifests=False)


@dataclass(frozen=True)
class SoakSettings:
    minutes: float
    seed: int
    # Longer than the usual gap between two sweeps (a CLI holds the lease while it joins Ray, a killed
    # one until its TTL): with a shorter grace every orphan's clock restarts before it is due, and no
    # delete ever races the moves.
    grace_s: float = 15.0
    lease_ttl_s: float = 5.0  # the CLI sweepers' (tools/testbed/tuned_cli.py); the sidecar's is 60
    interval_s: float = 1.0
    # Rows per TQ request, listing windows included; deletes go a quarter at a time (they wait for quiet
    # moments): 50 a batch, so that many batches race the moves. At 50 the listing of the bulk rows took
    # 13 s a sweep, most of the grace, and a 2-minute soak in CI deleted nothing while its chaos ran.
    batch: int = 200
    # How long the sidecar's listings reuse an index range: a row put meanwhile at an index the range
    # lacks is first seen up to this much later. 0: tq-gc asks at every listing (not a setting).
    index_range_reuse_s: float = 0.0
    # Renewed every second, so a Redis restart is noticed within one; long enough that a publisher
    # thread stalled on a loaded box does not let it lapse (counted as "lapses" if it does).
    admission_ttl_seconds: float = 10.0
    renew_every_s: float = 1.0
    fence_ttl_s: float = 5.0
    tick_s: float = 0.4  # the leaker's pace
    calm: Pace = CALM
    calm_publishers: int = 3
    hot: Pace = HOT
    hot_publishers: int = 3
    hopping: Pace = HOT_HOPS
    hopping_publishers: int = 3
    cli_pause_s: tuple[float, float] = (1.0, 4.0)
    kill_chance: float = 0.6
    kill_after_s: tuple[float, float] = (1.0, 10.0)  # a CLI needs ~3-6 s to start: kills fall before and in
    # Each restart forgets every first sighting: restarts more often than a grace plus a sweep would
    # leave nothing due while the chaos runs.
    redis_restart_every_s: tuple[float, float] = (40.0, 80.0)
    checkpoint_every_s: tuple[float, float] = (12.0, 25.0)
    # A calm publisher connecting as an ACL user refused everything now and then (tools/soak/refusals.py).
    refused_publishers: int = 1
    refusal_every_s: tuple[float, float] = (10.0, 30.0)
    refusal_window_s: tuple[float, float] = (2.0, 8.0)
    checkpoint_window_s: float = 3.0
    check_every_s: float = 2.0
    bulk_rows: int = 50000
    # The sweepers that list by the change journal, in its check mode (tools/soak/journal_checks.py): the
    # sidecar, the one whose store lives from sweep to sweep (each CLI run attaches afresh, so its one
    # listing is the journal's full base), and cli-b, SIGKILLed at random: its journal holds are never
    # given back. cli-a lists in full, the default: its deletes are the job's churn to the journal.
    journal_sweepers: tuple[str, ...] = ("sidecar", "cli-b")
    bulk_samples: int = 2000

    @property
    def overdue_s(self) -> float:
        """An orphan still there this long after it became one is a sweeper's failure."""
        return self.grace_s + 2 * self.interval_s + self.index_range_reuse_s

    @property
    def settle_s(self) -> float:
        """After the chaos, the sidecar sweeps on for at least grace + 3 intervals ..."""
        return self.grace_s + 3 * self.interval_s + self.index_range_reuse_s

    @property
    def settle_at_most_s(self) -> float:
        """... and until it has had its chance at every orphan (a completed sweep after the last one
        appeared, then sweeps up to one a grace later; a killed CLI's lease may hold it off a while),
        but no longer than this."""
        return 120.0
