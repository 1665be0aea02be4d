"""A swept partition's keys by the change journal (change_journal.py): the last full listing kept, and
only the global indexes touched since re-read and merged into it. Off by default: TransferQueueRowStore's
`change_journal` (JournalSettings) turns it on.

One sweep of a partition: one journal read (its seq taken BEFORE any re-read, so that a call racing a
re-read is in the next sweep's answer; re-reading an index is idempotent), then the touched indexes' keys
and sizes in key windows (key_windows.py), merged into the kept listing. Nothing touched: no listing work
beyond that read. The full listing (listing.py, without reusing an older listing's indexes) runs instead,
and becomes the new base at the seq read before it, whenever the journal cannot be trusted: not installed
(another TQ version, said once in the log), another epoch (a reinstall, a replaced controller), an
overflow, a `load_checkpoint`, a whole partition touched (created, cleared), a call from before the install
still running; and at least every `full_listing_every_seconds`.

Only a swept partition's keys: a row this listing misses is not deleted, and one it lists that changed
under it fails its re-check before any delete (global index and tags). A reference source's rows (tags)
are always listed in full: the journal cannot see a mutation made by a Ray call of a controller method
(change_journal.py), and a tag missed there could delete a referenced row.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tq_gc.errors import StoreUnavailable
from tq_gc.listings import HowListed
from tq_gc.stores.transferqueue.change_journal import journal_installer, journal_reader, journal_uninstaller
from tq_gc.stores.transferqueue.controller_function import MISFITS
from tq_gc.stores.transferqueue.journal_check import JournalCheck
from tq_gc.stores.transferqueue.requests import OP_JOURNAL, TqRequests

logger = logging.getLogger(__name__)

# The most global indexes the journal holds (~3 MB in the controller); more changes between two sweeps
# make the next listing a full one.
JOURNAL_CAPACITY_INDEXES = 100_000
# A full listing at least this often, whatever the journal says: a base never older than this.
FULL_LISTING_EVERY_SECONDS = 3600.0

# Why a listing was a full one, as the report's listings say it (besides the journal's own answer: an
# overflow, a load_checkpoint, a call from before the install still running).
JOURNAL_OFF = "the change journal is off"
WITH_TAGS = "a reference source's partition, listed with its tags: always in full"
FIRST_LISTING = "no listing kept from an earlier sweep: this one is the journal's base"
ANOTHER_JOURNAL = "the journal in the controller is another one (installed again, or a new controller)"
WHOLE_PARTITION = "the whole partition was created or cleared"
WINDOWS_MISFIT = "the key windows do not fit the controller"


@dataclass(frozen=True)
class JournalSettings:
    """The change journal's bound in the controller, and how old a kept listing may grow. `check` (tests
    and the soak only): each listing that re-read only what changed is followed by a full one, compared
    (journal_check.py)."""

    capacity_indexes: int = JOURNAL_CAPACITY_INDEXES
    full_listing_every_seconds: float = FULL_LISTING_EVERY_SECONDS
    check: JournalCheck | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.capacity_indexes < 1:
            raise ValueError(f"need capacity_indexes >= 1, got {self.capacity_indexes}")


@dataclass
class KeptKeys:
    """A partition's keys as listed at the journal's (`epoch`, `seq`), and the bytes of those whose size
    was read: {key: global index}, its inverse, {key: bytes}. Pure data."""

    keys: dict[str, int]
    sizes: dict[str, int]
    epoch: str
    seq: int
    based_at: float  # monotonic seconds of the full listing it started from
    by_index: dict[int, str] = field(init=False)

    def __post_init__(self) -> None:
        self.by_index = {index: key for key, index in self.keys.items()}

    def forget(self, indexes: Sequence[int]) -> None:
        """Drop the rows at `indexes` (each will be read again)."""
        for index in indexes:
            key = self.by_index.pop(index, None)
            if key is not None and self.keys.get(key) == index:
                del self.keys[key]
                self.sizes.pop(key, None)

    def add(
        self, indexes: Sequence[int], keys: Sequence[str | None], row_bytes: Sequence[int] | None
    ) -> None:
        """The rows read at `indexes`, forgotten before: each index's key (None: no row) and bytes (-1
        unknown; None: no sizes read). A key read at another index than the kept one moved there."""
        for position, (index, key) in enumerate(zip(indexes, keys, strict=True)):
            if key is None:
                continue
            moved_from = self.keys.get(key)
            if moved_from is not None and moved_from != index:
                self.by_index.pop(moved_from, None)
            self.keys[key] = index
            self.by_index[index] = key
            size = -1 if row_bytes is None else row_bytes[position]
            if size >= 0:
                self.sizes[key] = size
            else:
                self.sizes.pop(key, None)


# (partition, global indexes) -> (each index's key, None where none; bytes of each, or None), or None when
# the key windows do not fit the controller
ReadWindow = Callable[[str, list[int]], "tuple[list[str | None], list[int] | None] | None"]
# partition -> ({key: global index}, {key: bytes}) by a full listing
FullListing = Callable[[str], "tuple[dict[str, int], Mapping[str, int]]"]
# ({key: global index}, {key: bytes}, how they were listed)
Listed = tuple[dict[str, int], Mapping[str, int], HowListed]


class ChangeJournal:
    """tq-gc's side of the journal in the controller: installed on first use, read, uninstalled by
    close(). Once it could not be installed (another TQ version, said once in the log), None answers
    from then on: full listings."""

    def __init__(self, requests: TqRequests, controller: Any, settings: JournalSettings) -> None:
        self._requests = requests
        self._controller = controller
        self._install = journal_installer(settings.capacity_indexes)
        self._read = journal_reader()
        self._uninstall = journal_uninstaller()
        self.epoch: str | None = None
        self.refused: str | None = None

    def changes(self, epoch: str | None, since: int | None, partition: str) -> dict[str, Any] | None:
        """The journal's answer (change_journal.Read) for `partition` since (`epoch`, `since`), installing
        it first where needed; None when it cannot be installed."""
        if self.refused is not None or (self.epoch is None and not self._installed()):
            return None
        answer = self._call("read", self._read, epoch, since, [partition])
        if not answer["installed"]:  # removed under us (another holder's last uninstall): again
            self.epoch = None
            if not self._installed():
                return None
            answer = self._call("read", self._read, epoch, since, [partition])
        return dict(answer)

    def close(self) -> None:
        """Leave the journal; the last holder puts the controller's methods back. Best effort."""
        epoch, self.epoch = self.epoch, None
        if epoch is None:
            return
        try:
            self._call("uninstall", self._uninstall, epoch)
        except StoreUnavailable as exc:
            logger.warning("removing the change journal from the TransferQueue controller failed: %s", exc)

    def _installed(self) -> bool:
        answer = self._call("install", self._install)
        if answer["installed"]:
            self.epoch = str(answer["epoch"])
            return True
        self._refuse(str(answer["why"]))
        return False

    def _refuse(self, why: str) -> None:
        self.refused = why
        logger.warning("no change journal in the TransferQueue controller (%s): full listings", why)

    def _call(self, what: str, function: Callable[..., Any], *args: Any) -> Any:
        try:
            return self._requests.actor_call(
                OP_JOURNAL, f"change journal {what}", self._controller, "__ray_call__", function, *args
            )
        except StoreUnavailable as exc:
            if isinstance(exc.__cause__, MISFITS) and self.refused is None:
                self._refuse(f"its {what} does not fit the controller: {exc.__cause__}")
                return {"installed": False, "why": self.refused}
            raise


class JournalledKeys:
    """list_keys by the journal: `read_window` reads a window of indexes (of `window` at most), `full` lists
    a partition in full, `pause` paces the windows."""

    def __init__(
        self,
        journal: ChangeJournal,
        settings: JournalSettings,
        read_window: ReadWindow,
        window: Callable[[], int | None],
        full: FullListing,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.journal = journal
        self._settings = settings
        self._read_window = read_window
        self._window = window
        self._full = full
        self._clock = clock
        self._kept: dict[str, KeptKeys] = {}
        self.full_listings = 0  # how many listings were full ones (tests, benches)

    def keys(self, partition: str) -> Listed:
        """({key: global index}, {key: bytes}) of the partition, as a full listing would list them, and
        how: by the journal (the indexes re-read), or in full and why."""
        kept = self._kept.get(partition)
        if kept is None:
            answer = self.journal.changes(None, None, partition)
        else:
            answer = self.journal.changes(kept.epoch, kept.seq, partition)
        why = self._why_in_full(kept, answer, partition)
        if why is None:
            assert kept is not None and answer is not None  # what _why_in_full found
            touched = answer["touched"].get(partition, [])
            if self._merged(partition, kept, touched):
                kept.seq = int(answer["seq"])
                listed = dict(kept.keys), dict(kept.sizes)
                if self._settings.check is not None:
                    self._checked(self._settings.check, partition, kept, listed)
                return *listed, HowListed.by_journal(len(touched))
            why = WINDOWS_MISFIT
        return self._listed_in_full(partition, answer, why)

    def _checked(
        self,
        check: JournalCheck,
        partition: str,
        kept: KeptKeys,
        listed: tuple[dict[str, int], dict[str, int]],
    ) -> None:
        """The check mode: a full listing right after, compared with `listed` but at the indexes the
        journal says were touched since `kept.seq` (read before the re-reads), which may be in or out."""
        full = self._full(partition)
        answer = self.journal.changes(kept.epoch, kept.seq, partition)
        if answer is None or not answer["trusted"] or answer["epoch"] != kept.epoch:
            check.not_comparable(partition, str((answer or {}).get("why") or "no journal"))
            return
        touched = answer["touched"].get(partition, [])
        if touched is None:
            check.not_comparable(partition, "the whole partition was touched")
            return
        check.compare(partition, listed, full, set(touched))

    def _why_in_full(
        self, kept: KeptKeys | None, answer: dict[str, Any] | None, partition: str
    ) -> str | None:
        """Why the kept listing plus what the journal says touched is not the partition now (so a full
        listing), or None: it is."""
        if answer is None:
            return f"no change journal ({self.journal.refused or 'not installed'})"
        if not answer["settled"]:
            return str(answer["why"])
        if kept is None:
            return FIRST_LISTING
        if answer["epoch"] != kept.epoch:
            return ANOTHER_JOURNAL
        if not answer["trusted"]:
            return str(answer["why"] or FIRST_LISTING)
        if answer["touched"].get(partition, ()) is None:
            return WHOLE_PARTITION
        age_seconds, every_seconds = self._clock() - kept.based_at, self._settings.full_listing_every_seconds
        if age_seconds >= every_seconds:
            return (
                f"a full listing at least every {every_seconds:g} s (the kept one is {age_seconds:.0f} s old)"
            )
        return None

    def _merged(self, partition: str, kept: KeptKeys, touched: list[int]) -> bool:
        """Re-read the touched indexes into `kept`; False (kept dropped) if the key windows do not fit."""
        if not touched:
            return True
        size = self._window()
        if size is None:
            del self._kept[partition]
            return False
        kept.forget(touched)
        for start in range(0, len(touched), size):
            window = touched[start : start + size]
            read = self._read_window(partition, window)
            if read is None:
                del self._kept[partition]
                return False
            kept.add(window, *read)
        return True

    def _listed_in_full(self, partition: str, answer: dict[str, Any] | None, why: str) -> Listed:
        """A full listing (`why`); the new base at the answer's seq (read before it) where the journal
        allows."""
        self._kept.pop(partition, None)
        if answer is not None and not answer["settled"]:  # read again: it may have settled by now
            answer = self.journal.changes(None, None, partition)
        based_at = self._clock()
        keys, sizes = self._full(partition)
        self.full_listings += 1
        if self._settings.check is not None:
            self._settings.check.listed_in_full(partition, why)
        if answer is not None and answer["settled"] and answer["epoch"] is not None:
            kept = KeptKeys(dict(keys), dict(sizes), str(answer["epoch"]), int(answer["seq"]), based_at)
            self._kept[partition] = kept
        return keys, sizes, HowListed.in_full(why)
