"""Keys a release renamed or removed: a config that still sets one is refused, and the message names what
replaces it (or why it went), instead of the unknown-key suggestion (docs/configuration.md, "Renamed and
removed keys"). A path's `[]` stands for every item of a list section."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tq_gc.config.suggest import Loc

_WHEN_EMPTY = "when_empty (abort, abort_if_it_had_rows or accept): the two opposite flags became one"
_FIXED = "removed: tq-gc uses a fixed value"
_FIXED_BATCH = (
    f"{_FIXED} (2000, the most keys of a TransferQueue request and rows of a delete batch; pacing adapts "
    "each request between a quarter of it and it, and a lower `tq-gc --duty-cycle` presses less)"
)
_FIXED_QUIET = (
    f"{_FIXED} (20 ms: each request waits until the job's TransferQueue controller served nothing that "
    "long, 250 ms at most)"
)
# How hard a process presses on the job's TransferQueue controller is chosen where it starts.
_DUTY_CYCLE = (
    "chosen where the process starts: `tq-gc --duty-cycle F <command>` (sweep, serve, demo; 0 < F <= 1, "
    "default 0.25: a sidecar beside the job's steps; 1, no pauses: a CronJob or a manual sweep from another "
    "node), or start_sidecar(config, duty_cycle=F)"
)
_ONE_THROTTLE = (
    f"the duty cycle is the one throttle, of listings and deletes alike, {_DUTY_CYCLE} (lower it to press "
    "less on the job's TransferQueue controller)"
)
_SIDECAR_NAME = (
    "the sidecar's actor is always named tq-gc (Ray namespace tq_gc): one sidecar per Ray cluster, as "
    "TransferQueue runs one controller per Ray cluster and its claim lets one state store sweep it"
)
_METRICS_PORT = (
    "where the sidecar serves its metrics is chosen where it is started: `tq-gc serve --metrics-port N` "
    "(0: any free port; without it: off), or start_sidecar(config, metrics_port=N)"
)

RETIRED: Mapping[str, str] = {
    "transfer_queue.request_batch": _FIXED_BATCH,
    "transfer_queue.duty_cycle": f"removed: {_DUTY_CYCLE}",
    "transfer_queue.pacing": "removed: the section went with its last setting, the duty cycle, "
    f"{_DUTY_CYCLE}",
    "transfer_queue.pacing.duty_cycle": f"removed: {_DUTY_CYCLE}",
    "transfer_queue.quiet_ms": _FIXED_QUIET,
    "transfer_queue.pacing.batch": _FIXED_BATCH,
    "transfer_queue.pacing.quiet_ms": _FIXED_QUIET,
    "transfer_queue.quiet_wait_max_ms": f"{_FIXED} (250 ms, the longest wait for a quiet controller)",
    "transfer_queue.request_target_ms": f"{_FIXED} (10 ms, the request time that halves the next one)",
    "transfer_queue.index_range_reuse_seconds": f"{_FIXED} (0: every listing asks the controller)",
    "transfer_queue.ray_namespace": "removed: tq-gc finds the TransferQueue controller in TQ's own Ray "
    "namespace, whatever namespace it joins",
    "limits.delete_batch": _FIXED_BATCH,
    "limits.max_deletes_per_second": f"removed: {_ONE_THROTTLE}",
    "transfer_queue.pacing.max_deletes_per_second": f"removed: {_ONE_THROTTLE}",
    "limits.fraction_min_rows": f"{_FIXED} (100: below that many eligible rows the fraction guard is quiet)",
    "schedule.jitter_seconds": "removed: sweeps start on the schedule, without jitter",
    "schedule.misfire_grace_seconds": f"{_FIXED} (30 s)",
    "sidecar": f"removed: the section went with its last two settings: {_SIDECAR_NAME}; {_METRICS_PORT}",
    "sidecar.name": f"removed: {_SIDECAR_NAME}",
    "sidecar.metrics_port": f"removed: {_METRICS_PORT}",
    "sidecar.ray_namespace": "removed: the sidecar lives in the Ray namespace tq_gc",
    "sidecar.num_cpus": f"{_FIXED} (0.1 CPU)",
    "pressure.interval_seconds": f"{_FIXED} (30 s between the sweeps under storage pressure)",
    "pressure.check_seconds": f"{_FIXED} (15 s between two reads of the storage's fill)",
    "pressure.audit_leftovers": "removed: each sweep audits the storage's leftovers while the storage is "
    "under pressure (headroom below pressure.headroom_below), and never otherwise",
    "manifests[].expect_nonempty": f"replaced by {_WHEN_EMPTY}; expect_nonempty: true is when_empty: abort",
    "manifests[].may_become_empty": f"replaced by {_WHEN_EMPTY}; may_become_empty: true is when_empty: "
    "accept",
    "manifests[].mount_point": "removed: use marker, a file the volume carries under the glob's base "
    "(such as .tq-gc-volume): an unmounted volume's empty mount point lacks it, which fails the source",
    "scope[].owner.when_empty": "removed: owner rules always accept being empty, since the owner rows come "
    "from the same partition's listing as the rows they protect, so an empty owner set is the job "
    "releasing them, never a failed read (a listing that fails aborts the sweep)",
    "scope[].created_by_stack": "removed: a scope partition the job has not written yet is swept as empty, "
    "owner rule or not, with a warning naming it (scope_partition_missing; `tq-gc check` fails only a name "
    "close to an existing partition's, a likely typo): delete the key",
    "log_format": "removed: how the process prints its logs is the command line's choice, not the "
    "collector's: `tq-gc --log-format json <command>` (beside --log-level; the sidecar logs as text)",
    "sidecar.execute": "removed: a dry-run sidecar is chosen where it is started, as `tq-gc sweep` chooses "
    "with --execute: `tq-gc serve --dry-run`, or start_sidecar(config, dry_run=True) in Python (without "
    "them the sidecar deletes, as execute: true did)",
    "lease_ttl_seconds": f"{_FIXED} (60 s, the sweep lease's time to live, renewed every 20 s while a "
    "sweep runs: a crashed sweeper blocks the next one for at most a minute)",
    "manifests[].max_file_bytes": f"{_FIXED} (64 MiB: a larger file fails the source)",
    "tag_references[].expect_nonempty": f"replaced by {_WHEN_EMPTY}; expect_nonempty: true is when_empty: "
    "abort",
    "tag_references[].may_become_empty": f"replaced by {_WHEN_EMPTY}; may_become_empty: true is when_empty: "
    "accept",
    "owner_references": "owner_references was replaced by scope[].owner: on the scope entry of the "
    "partition, with its key_pattern, write owner: {key: '{uid}', has_tag: is_prompt} "
    "(owner_key is owner.key, owner_has_tag is has_tag). owner_tag and owner_partition are gone (no "
    "stack's layout and no shipped config used them): the owner rows are in the entry's partition, and "
    "the owner's key comes from the key template",
}


def retired_keys(data: Mapping[str, Any]) -> Iterator[tuple[Loc, str]]:
    """(where, what replaces it) of every retired key `data` sets."""
    for path, message in RETIRED.items():
        for loc in _places(data, path.split(".")):
            yield loc, message


def _places(node: Any, parts: list[str], loc: Loc = ()) -> Iterator[Loc]:
    if not isinstance(node, Mapping):
        return
    part, rest = parts[0], parts[1:]
    if part.endswith("[]"):
        items = node.get(part[:-2])
        if isinstance(items, list | tuple):
            for index, item in enumerate(items):
                yield from _places(item, rest, (*loc, part[:-2], index))
        return
    if part not in node:
        return
    if rest:
        yield from _places(node[part], rest, (*loc, part))
    else:
        yield (*loc, part)
