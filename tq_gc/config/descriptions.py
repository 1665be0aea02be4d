"""What each config field means, in a sentence: the JSON Schema's descriptions (`tq-gc config schema`).
Kept beside the models, not in them, so a field's validation reads undisturbed; a test fails on a field
without a description and on a description of no field."""

from __future__ import annotations

from collections.abc import Mapping

WHEN_EMPTY = (
    "A source that reads as empty: abort (the sweep, always), abort_if_it_had_rows (the default: only "
    "after it named rows) or accept (the job may really drop every reference)."
)

DESCRIPTIONS: Mapping[str, Mapping[str, str]] = {
    "Config": {
        "namespace": "Separates jobs sharing one state store (letters, digits, _ . : -).",
        "state_url": "Where tq-gc keeps its state: memory:// (the sidecar's own memory), "
        "redis://host:6379/0, rediss://..., unix:///path.sock. Its one option of its own: ?wait_replicas=N "
        "(replicated Redis: a write a failover must not lose returns once N replicas have it).",
        "transfer_queue": "How to reach the job's TransferQueue, and how hard tq-gc may press on it.",
        "scope": "The partitions and keys a sweep may delete; nothing outside them is ever a candidate.",
        "protected_partitions": "Partitions scope may not name unless allow_unsafe_scope (and rollout_data).",
        "allow_unsafe_scope": "Let scope name a protected partition. Only if you really mean it.",
        "grace_seconds": "How long a row must be seen unreferenced, on the state store's clock, before it is "
        "eligible. At least 60 unless allow_short_grace; sweeps must come at least twice per grace.",
        "allow_short_grace": "Allow grace_seconds below 60 (tests and demos only).",
        "admissions": "The admission registry as a reference source.",
        "manifests": "Files that name referenced rows (checkpoint manifests, NeMo RL records).",
        "tag_references": "Rows whose tags name other rows, which are referenced while those rows exist.",
        "limits": "The blast radius of one sweep.",
        "schedule": "When the sidecar sweeps: interval_seconds or cron.",
        "pressure": "Storage pressure: sweep sooner while TransferQueue's storage is nearly full.",
    },
    "TransferQueueConfig": {
        "ray_address": "The Ray cluster to join: auto, host:6379 (GCS) or ray://head:10001.",
    },
    "ScopeEntry": {
        "partition": "The partition swept.",
        "prefixes": "Keys starting with one of these are in scope ('' and '*' are refused: say all_keys).",
        "all_keys": "Every key of the partition is in scope (a staging partition).",
        "key_pattern": "A regular expression the whole key must match to be in scope.",
        "owner": "Rows in scope are referenced while their owner row exists in this partition (verl's "
        "trajectories while their prompt row); needs key_pattern.",
    },
    "AdmissionsConfig": {
        "expect_nonempty": "No live admission aborts the sweep (a job whose publishers always hold one).",
    },
    "ManifestSource": {
        "glob": "Absolute path pattern of the manifest files (** is any number of directories).",
        "format": "native (tq-gc/manifest/v1), json, jsonl or nemo_rl_recovery.",
        "key_path": "Where the keys are in each json or jsonl document (names joined by dots).",
        "partition": "The partition the keys are in (json, jsonl; nemo_rl_recovery has a default).",
        "marker": "A file the volume carries under the glob's base: its absence fails the source.",
        "when_empty": WHEN_EMPTY,
    },
    "TagReference": {
        "partition": "The partition whose rows' tags name other rows.",
        "key_path": "Where in the tags the named keys are (names joined by dots).",
        "target_partition": "The partition the named rows are in.",
        "when_empty": WHEN_EMPTY,
    },
    "Owner": {
        "key": "The owner row's key, a template of the entry's key_pattern's named groups, such as '{uid}'.",
        "has_tag": "Only an owner row carrying this tag (true) owns (verl: is_prompt).",
    },
    "Limits": {
        "max_deletes_per_run": "The most rows one sweep deletes; it stops at the cap (--max-deletes cannot "
        "raise it).",
        "max_delete_fraction": "A sweep that would delete more than this share of the in-scope rows aborts.",
    },
    "Schedule": {
        "interval_seconds": "Seconds between two sweeps of the sidecar (at most grace_seconds / 2).",
        "cron": "A crontab expression instead of interval_seconds (longest gap <= grace_seconds / 2).",
    },
    "PressureConfig": {
        "headroom_below": "Below this free fraction of the fullest storage unit, the sidecar sweeps at once "
        "and then every 30 s while it stays below (the fill is read every 15 s), and reports warn (unset: "
        "off). Never shortens a grace. Under pressure each sweep also audits the storage for cells no row "
        "owns (O(rows)), reported in storage.leftovers.",
    },
}
