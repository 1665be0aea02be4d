"""Manifests change while sweeps run: rewritten atomically (tmp + rename) and in place (truncate, then
write: a reader can find the file empty or half written), removed and written again, and finally left
truncated by a checkpoint writer that died. A manifest that cannot be read fails the sweep closed
(exit 4, nothing deleted), never reads as "no rows"; no referenced row is deleted, reruns converge
once the manifests are whole again, and the audit names every removed row.

The stable manifest holds its rows alone; the one removed and written again holds rows that a live
admission holds too (removing a manifest for good releases its rows: that is not a fault).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from harness import keys_in

from .conftest import ORPHANS, MakeJob
from .helpers import Job
from .properties import (
    FAULT_GRACE_S,
    OBSERVE_EVERY_S,
    assert_audit_names_every_removed_row,
    assert_referenced_intact,
    converge,
    in_process_sweep,
    mark,
)

pytestmark = pytest.mark.ray

CHURN_EVERY_S = 0.01
HALF_WRITTEN_FOR_S = 0.005
CHURN_PAST_GRACE_S = 3.0
# A hang guard, not a duration: sweeping while the manifests churn goes on until past the grace, with every
# kind of churn done and a sweep completed; a starved machine may take minutes to get there.
CHURN_HANG_GUARD_S = 600.0
LATE_ORPHANS = 50


def manifest_text(manifest_id: str, partition: str, keys: Sequence[str]) -> str:
    return json.dumps(
        {"format": "tq-gc/manifest/v1", "manifest_id": manifest_id, "state": "active",
         "rows": {partition: sorted(keys)}}
    )  # fmt: skip


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class ManifestChurn(threading.Thread):
    """Rewrites the stable manifest atomically and in place, and removes and rewrites the other one,
    every few milliseconds, always with the same rows."""

    def __init__(self, job: Job, stable: Path, volatile: Path) -> None:
        super().__init__(name="manifest-churn", daemon=True)
        self._job, self._stable, self._volatile = job, stable, volatile
        self._stop_event = threading.Event()
        self.steps = Counter[str]()

    def run(self) -> None:
        step = 0
        while not self._stop_event.wait(CHURN_EVERY_S):
            step += 1
            stable_text = manifest_text(f"ckpt-{step:06d}", self._job.partition, sorted(self._job.manifested))
            if step % 3 == 0:
                write_atomically(self._stable, stable_text)
                self.steps["rewritten atomically"] += 1
            elif step % 3 == 1:
                with self._stable.open("w") as file:  # truncates: a reader may see it empty ...
                    file.write(stable_text[: len(stable_text) // 2])
                    file.flush()  # ... or half written
                    time.sleep(HALF_WRITTEN_FOR_S)
                    file.write(stable_text[len(stable_text) // 2 :])
                self.steps["rewritten in place"] += 1
            else:
                self._volatile.unlink()
                time.sleep(HALF_WRITTEN_FOR_S)
                write_atomically(
                    self._volatile, manifest_text("ckpt-2", self._job.partition, sorted(self._job.admitted))
                )
                self.steps["removed and written again"] += 1

    def close(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)


def test_manifests_rewritten_truncated_and_removed_while_sweeps_run(
    make_job: MakeJob,
    redis_url: str,
    tq: Any,
    put_rows: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = make_job(redis_url, grace_s=FAULT_GRACE_S)
    stable = tmp_path / "ckpt" / "ckpt-000001" / "gc-manifest.json"  # make_job's, naming job.manifested
    volatile = tmp_path / "ckpt" / "ckpt-000002" / "gc-manifest.json"
    assert stable.exists()
    write_atomically(volatile, manifest_text("ckpt-2", job.partition, sorted(job.admitted)))
    sweep = in_process_sweep(capsys, job)
    marked = mark(sweep, job, ORPHANS)

    # 1. Sweeps while the manifests churn, past the orphans' grace: each completes or fails closed,
    # none deletes a held row.
    churn = ManifestChurn(job, stable, volatile)
    churn.start()
    codes = Counter[int]()
    past_grace = marked.monotonic + FAULT_GRACE_S + CHURN_PAST_GRACE_S
    give_up = time.monotonic() + CHURN_HANG_GUARD_S
    try:
        # Not only until past the grace: the marking sweep alone may outlast that on a busy machine.
        while time.monotonic() < past_grace or len(churn.steps) < 3 or codes[0] == 0:
            assert time.monotonic() < give_up, f"churn {churn.steps}, sweeps {codes}"
            result = sweep()
            codes[result.code] += 1
            assert result.code in (0, 4), result.why()
            assert_referenced_intact(tq, job)
            time.sleep(OBSERVE_EVERY_S / 2)
    finally:
        churn.close()
    assert min(churn.steps.values(), default=0) > 0, churn.steps
    assert codes[0] > 0, codes
    converge(sweep, tq, job)
    assert_referenced_intact(tq, job)

    # 2. A checkpoint writer died mid-write: the manifest is left empty, then half written. Every
    # sweep fails closed, a grace later too; nothing is deleted, not even the new orphans.
    late = {f"late-{i:03d}" for i in range(LATE_ORPHANS)}
    put_rows(job.partition, sorted(late))
    job.orphans |= late
    whole = manifest_text("ckpt-000001", job.partition, sorted(job.manifested))
    before = keys_in(tq, job.partition)
    for content in ("", whole[: len(whole) // 2], whole[: len(whole) // 2]):
        stable.write_text(content)
        result = sweep()
        assert result.code == 4, result.why()
        report = result.json()
        assert report["outcome"] == "aborted" and "manifest" in report["reason"], report
        assert keys_in(tq, job.partition) == before
        time.sleep(FAULT_GRACE_S / 2 + 0.1)

    # 3. The manifest whole again: sweeps converge.
    write_atomically(stable, whole)
    converge(sweep, tq, job)
    assert_referenced_intact(tq, job)
    assert_audit_names_every_removed_row(capsys, tq, job)
