"""What a sweep sees now: the listing of every partition it needs, and every reference, read in the
order that keeps a moving reference in view."""

from __future__ import annotations

from collections.abc import Mapping

from tq_gc.config import Config
from tq_gc.referenced import References
from tq_gc.references.admissions import AdmissionsSource
from tq_gc.references.emptied import collected_yields, guard_emptied_sources
from tq_gc.references.manifests import ManifestsSource
from tq_gc.references.owners import OwnersSource
from tq_gc.references.tags import TagsSource
from tq_gc.report import WarningKind, missing_partition, warn
from tq_gc.rows import ListedKeys, Listing, Tags, merge_keys
from tq_gc.state.base import StateStore
from tq_gc.stores.base import RowStore
from tq_gc.sweep.run import SweepRun


class Observer:
    """Reads the listing and the references of one sweep, each source completely or not at all (a
    source that fails raises, and the sweep deletes nothing)."""

    def __init__(self, config: Config, state: StateStore, row_store: RowStore) -> None:
        self.config = config
        self.state = state
        self.row_store = row_store
        self.admissions = AdmissionsSource(state, expect_nonempty=config.admissions.expect_nonempty)
        self.manifests = ManifestsSource(config.manifests)
        self.tags = TagsSource(config.tag_references, row_store)
        self.owners = OwnersSource(config.owner_references, row_store)
        # What the sources yielded at this sweeper's last sweep that read them all: it stands in for the
        # store's record if the store loses it (references/emptied.py).
        self._source_counts: dict[str, int] | None = None

    def read(self, run: SweepRun) -> tuple[Listing, References]:
        """The listing, and every reference, read so that no reference that lives through the sweep is
        missed however it moves, for publishers that follow the protocol (move inside an admission,
        `GcClient.holding()`, or inside a checkpoint fence), and once even outside it.

        Inside the protocol: every admission made since the lease was taken is in the write barrier
        (StateStore.admitted_since_lease), which the collector asks after the plan and before every
        delete batch; a fence raised since the lease stops every later delete. A reference that did not
        move while the sweep read is where its source's read found it, so admissions are read first.

        Outside it, one make-before-break move from source X to Y is missed only if every read of Y
        comes before it reaches Y and every read of X after it left X: all reads of Y before all reads
        of X. So for every ordered pair of sources some read of X must precede some read of Y:
        admissions, manifests, tags (the listing), admissions, manifests does that for all six pairs.
        The second admissions read costs nothing unless an admission was made since the first
        (AdmissionsSource.reread). Owner references are read from the listing too, in the tags' slot.
        """
        listed: list[Listing] = []
        with run.phase("references"):
            admissions, manifests = self.admissions.read(), self.manifests.read()
        with run.phase("list", lambda: sum(len(rows) for rows in listed[0].values()) if listed else None):
            listing, existing = self._list()
            listed.append(listing)
        self._warn_of_missing_partitions(run, existing)
        with run.phase("references"):
            tags = self.tags.read(listing, existing)
            owners = self.owners.read(listing, existing)
            admissions = merge_keys(admissions, self.admissions.reread())
            manifests = merge_keys(manifests, self.manifests.read())
        yields = collected_yields(self.manifests.yields(), self.tags.counts, self.owners.counts)
        self._source_counts = guard_emptied_sources(
            self.state, run.held_lease, self.config, run.accept_empty, yields, self._source_counts
        )
        return listing, References(admissions=admissions, manifests=manifests, tags=tags, owners=owners)

    def _warn_of_missing_partitions(self, run: SweepRun, existing: set[str]) -> None:
        """A scope partition the row store does not have is swept as empty (its owner rule too: it names
        nothing), whether the job has not written it yet or it is misspelled: a misspelled one would read
        as "nothing to collect" forever, so each sweep warns."""
        for entry in self.config.scope:
            if entry.partition not in existing:
                warn(
                    run.report,
                    WarningKind.SCOPE_PARTITION_MISSING,
                    missing_partition(entry.partition, existing),
                )

    def _list(self) -> tuple[Listing, set[str]]:
        """Every scope, tag and owner partition's rows, and the partitions the store has (a tag partition
        it lacks fails its source; a scope one, owner rule or not, is simply empty).

        A reference source's partition is listed with its rows' tags, so that a reference moving
        between two of its rows is seen; a partition that is only swept, by its keys alone (a row that
        listing misses is not deleted, and its identity is read when it is first seen)."""
        existing = set(self.row_store.partitions())
        referring = set(self.tags.partitions) | set(self.owners.partitions)
        partitions = {entry.partition for entry in self.config.scope} | referring
        listing: dict[str, Mapping[str, Tags]] = {}
        for partition in sorted(partitions):
            if partition in referring:
                listing[partition] = self.row_store.list_rows(partition)
            else:
                listing[partition] = ListedKeys(self.row_store.list_keys(partition))
        return listing, existing
