"""What each config field means, in a sentence: the JSON Schema's descriptions (`tq-gc config schema`).
Kept beside the models, not in them, so a field's validation reads undisturbed; a test fails on a field
without a description and on a description of no field."""

from __future__ import annotations

from collections.abc import Mapping

DESCRIPTIONS: Mapping[str, Mapping[str, str]] = {
    "Config": {
        "namespace": "Separates jobs sharing one state store (letters, digits, _ . : -).",
        "state_url": "Where tq-gc keeps its state: memory:// (the sidecar's own memory), "
        "redis://host:6379/0, rediss://..., unix:///path.sock.",
        "transfer_queue": "How to reach the job's TransferQueue, and how hard tq-gc may press on it.",
        "scope": "The partitions and keys a sweep may delete; nothing outside them is ever a candidate.",
        "protected_partitions": "Partitions scope may not name unless allow_unsafe_scope (and rollout_data).",
        "allow_unsafe_scope": "Let scope name a protected partition. Only if you really mean it.",
        "grace_seconds": "How long a row must be seen unreferenced, on the state store's clock, before it is "
        "eligible. At least 60 unless allow_short_grace; sweeps must come at least twice per grace.",
        "allow_short_grace": "Allow grace_seconds below 60 (tests and demos only).",
        "lease_ttl_seconds": "The sweep lease's time to live (5 to 3600): one sweeper at a time.",
        "admissions": "The admission registry as a reference source.",
        "manifests": "Files that name referenced rows (checkpoint manifests, NeMo RL records).",
        "tag_references": "Rows whose tags name other rows, which are referenced while those rows exist.",
        "owner_references": "Rows referenced while an owner row exists (verl's trajectories and prompts).",
        "limits": "The blast radius of one sweep, and the delete batches' size and pace.",
        "schedule": "When the sidecar sweeps: interval_seconds or cron.",
        "sidecar": "The sidecar actor in the job's Ray cluster.",
        "log_format": "text, or json (JSON lines on stderr for log collectors).",
        "pressure": "Storage pressure: sweep sooner while TransferQueue's storage is nearly full.",
    },
    "TransferQueueConfig": {
        "ray_address": "The Ray cluster to join: auto, host:6379 (GCS) or ray://head:10001.",
        "ray_namespace": "The Ray namespace the job's TransferQueue lives in (default: Ray's).",
        "request_batch": "The most keys or global indexes one TransferQueue request asks for (<= 20000).",
        "request_target_ms": "A request slower than this halves the next one's size.",
        "duty_cycle": "The most of the wall time tq-gc's requests may take while it lists and deletes (1: no "
        "pauses).",
        "index_range_reuse_seconds": "A swept partition listed again this soon reuses the last listing's "
        "global indexes (0: ask every time).",
        "quiet_ms": "Before each request, wait until the controller is idle this long (0: never wait).",
        "quiet_wait_max_ms": "...or this long at most (at most 10000).",
    },
    "ScopeEntry": {
        "partition": "The partition swept.",
        "prefixes": "Keys starting with one of these are in scope ('' and '*' are refused: say all_keys).",
        "all_keys": "Every key of the partition is in scope (a staging partition).",
        "key_pattern": "A regular expression the whole key must match to be in scope.",
        "created_by_stack": "The stack creates this partition later (verl's val): while absent it is not "
        "a misspelling (no failed check, no warning).",
    },
    "AdmissionsConfig": {
        "expect_nonempty": "No live admission aborts the sweep (a job whose publishers always hold one).",
    },
    "ManifestSource": {
        "glob": "Absolute path pattern of the manifest files (** is any number of directories).",
        "format": "native (tq-gc/manifest/v1), json, jsonl or nemo_rl_recovery.",
        "key_path": "Where the keys are in each json or jsonl document (names joined by dots).",
        "partition": "The partition the keys are in (json, jsonl; nemo_rl_recovery has a default).",
        "expect_nonempty": "A source naming no row fails the sweep.",
        "max_file_bytes": "A larger file fails the source (default 64 MiB).",
        "marker": "A file the volume carries under the glob's base: its absence fails the source.",
        "mount_point": "The glob's base (or a parent) must be this mount point.",
        "may_become_empty": "Matching no file after naming rows is no failure.",
    },
    "TagReference": {
        "partition": "The partition whose rows' tags name other rows.",
        "key_path": "Where in the tags the named keys are (names joined by dots).",
        "target_partition": "The partition the named rows are in.",
        "expect_nonempty": "A key path that resolves in no row fails the sweep.",
        "may_become_empty": "Naming no row after naming some is no failure.",
    },
    "OwnerReference": {
        "partition": "The partition whose rows have owners.",
        "key_pattern": "A regular expression on the row's key; its named groups fill owner_key.",
        "owner_key": "The owner's key, a template of key_pattern's groups, such as '{uid}'.",
        "owner_tag": "Instead of key_pattern: the tag holding the owner's key.",
        "owner_partition": "Where the owner rows live (default: partition).",
        "owner_has_tag": "Only an owner row carrying this tag (true) owns.",
        "expect_nonempty": "A pattern or tag matching no row of a non-empty partition fails the sweep.",
        "may_become_empty": "Owning no row after owning some is no failure.",
        "created_by_stack": "The stack creates this partition later: while absent the rule names nothing "
        "(rows and owners in one partition only).",
    },
    "Limits": {
        "max_deletes_per_run": "The most rows one sweep deletes; it stops at the cap (--max-deletes cannot "
        "raise it).",
        "max_delete_fraction": "A sweep that would delete more than this share of the in-scope rows aborts.",
        "delete_batch": "Rows per delete batch (each re-checked right before it is deleted).",
        "max_deletes_per_second": "Delete pace (0: unthrottled).",
        "fraction_min_rows": "Below this many eligible rows the fraction guard stays quiet.",
    },
    "Schedule": {
        "interval_seconds": "Seconds between two sweeps of the sidecar (at most grace_seconds / 2).",
        "cron": "A crontab expression instead of interval_seconds (longest gap <= grace_seconds / 2).",
        "jitter_seconds": "Up to this many seconds added at random to each start.",
        "misfire_grace_seconds": "A sweep started this late is still run.",
    },
    "SidecarConfig": {
        "name": "The sidecar actor's name in Ray.",
        "ray_namespace": "The Ray namespace of the sidecar actor.",
        "num_cpus": "CPUs Ray reserves for the sidecar.",
        "metrics_port": "Serve Prometheus metrics on this port (0: any free port; unset: off).",
        "execute": "false makes the sidecar's scheduled sweeps dry runs.",
    },
    "PressureConfig": {
        "headroom_below": "Below this free fraction of the fullest storage unit, the sidecar sweeps at once "
        "and then every interval_seconds, and reports warn (unset: off). Never shortens a grace.",
        "audit_leftovers": "Each sweep also looks for storage cells no partition owns (reads every unit's "
        "keys: O(rows)), reported in storage.leftovers.",
        "interval_seconds": "How often the sidecar sweeps while the storage is under pressure.",
        "check_seconds": "How often the sidecar reads the storage units' fill between sweeps.",
    },
}
