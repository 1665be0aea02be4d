"""What a sweep remembers between sweeps: the first-seen records it trusts, the new sightings it
records (each pinned to its row's identity), and the records the write barrier takes back."""

from __future__ import annotations

from collections.abc import Mapping

from tq_gc.config import Config
from tq_gc.first_seen import FirstSeen
from tq_gc.plan import FirstSeenByPartition, Plan, admitted_meanwhile, stale_partitions, unreferenced_rows
from tq_gc.report import WarningKind, warn
from tq_gc.rows import ListedKeys, Listing, Tags
from tq_gc.state.base import StateStore
from tq_gc.stores.base import RowStore
from tq_gc.sweep.run import SweepRun


class Recorder:
    """Loads and saves a sweep's first-seen records. Only the lease holder writes them: each write
    checks the run's lease (LeaseLost if it was taken)."""

    def __init__(self, config: Config, state: StateStore, row_store: RowStore) -> None:
        self.config = config
        self.state = state
        self.row_store = row_store

    def trusted(self, run: SweepRun) -> FirstSeenByPartition:
        """Load the records of each scope partition, after forgetting those not to be trusted. The gap
        in sweeping runs from the last sweep's observation to this sweep's start (its lease): the
        seconds a sweep spends joining Ray and listing are sweeping, not a pause."""
        scope = [entry.partition for entry in self.config.scope]
        observed = self.state.observed()
        stale = stale_partitions(observed, scope, run.started_ms, run.policy.grace_ms)
        self._warn_of_a_gap(
            run, {partition: observed[partition] for partition in scope if partition in observed}
        )
        for partition in sorted(stale):
            self.state.forget_partition(run.held_lease, partition)
        return {
            partition: {} if partition in stale else self.state.load_first_seen(partition)
            for partition in scope
        }

    def _warn_of_a_gap(self, run: SweepRun, observed_ms: Mapping[str, int]) -> None:
        """Sweeps further apart than the grace (a CronJob's schedule tq-gc does not know, a paused
        sidecar) restart every row's grace: at that pace nothing is ever reclaimed. Say so, with both
        numbers."""
        gap_ms = max((run.started_ms - at_ms for at_ms in observed_ms.values()), default=0)
        if gap_ms <= run.policy.grace_ms:
            return
        grace_seconds = run.policy.grace_ms / 1000
        warn(
            run.report,
            WarningKind.SWEEP_GAP_OVER_GRACE,
            f"this sweep came {gap_ms / 1000:.0f} s after the last one, longer than grace_seconds="
            f"{grace_seconds:g}: every unreferenced row's grace restarted, and at this pace no row is ever "
            f"reclaimed. Sweep at least every {grace_seconds / 2:g} s (the CronJob's schedule), or raise "
            "grace_seconds",
        )

    def save(self, run: SweepRun, result: Plan, listing: Listing) -> None:
        """Record new first sightings, drop records of rows referenced again or gone, and mark every
        scope partition observed now. Each write checks our lease (LeaseLost if it was taken)."""
        for entry in self.config.scope:
            partition = entry.partition
            upserts = result.first_seen_upserts.get(partition, {})
            pinned = self._pinned(partition, upserts, listing.get(partition, {}))
            drops = result.first_seen_drops.get(partition, ())
            self.state.save_first_seen(run.held_lease, partition, pinned, drops, result.now_ms)

    def without_admitted_meanwhile(self, run: SweepRun, result: Plan) -> Plan:
        """The plan without the rows admitted since the sweep took its lease (the write barrier), their
        records (just saved) dropped again. Asked after the save: a row whose reference moved by the
        protocol at any time up to the save was admitted on the way, so no record claims it unreferenced
        while it was referenced, and its grace starts only once it really is unreferenced."""
        admitted: dict[str, set[str]] = {}
        for partition, unreferenced in sorted(unreferenced_rows(result).items()):
            hits = self.state.admitted_since_lease(run.held_lease, partition, unreferenced)
            if hits:
                admitted[partition] = hits
        for partition, keys in sorted(admitted.items()):
            self.state.save_first_seen(run.held_lease, partition, {}, keys, result.now_ms)
        return admitted_meanwhile(result, admitted)

    def _pinned(
        self, partition: str, upserts: Mapping[str, FirstSeen], listed: Mapping[str, Tags]
    ) -> dict[str, FirstSeen]:
        """Each newly seen row's record with its identity as the store has it now (global index and
        tags digest), so that a key recreated later is not mistaken for it; only if it is still the row
        the listing saw (the same tags, or the same global index for a partition listed by its keys).
        A row that cannot be pinned (gone since the listing) is not recorded: a record without its
        global index would match a row written later under the same key with the same tags, which would
        then be deleted on its first sighting. It is seen afresh by the next sweep."""
        indexes = listed.indexes if isinstance(listed, ListedKeys) else None
        pinned: dict[str, FirstSeen] = {}
        keys = sorted(upserts)
        size = self.config.transfer_queue.pacing.batch
        for start in range(0, len(keys), size):
            found = self.row_store.identities(partition, keys[start : start + size])
            for key, identity in found.items():
                record = upserts[key]
                if indexes is None:
                    same_row = identity.tags_digest == record.identity.tags_digest
                else:
                    same_row = identity.global_index == indexes[key]
                if same_row:
                    pinned[key] = FirstSeen(record.at_ms, identity)
        return pinned
