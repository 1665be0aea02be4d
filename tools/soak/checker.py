"""The checker: is every row the ground truth says is referenced still in TQ?"""

from __future__ import annotations

import logging
import threading

from .actor_controls import ActorSwitches
from .job_tq import STAGING, JobTq
from .truth import GroundTruth

log = logging.getLogger("soak")


class Checker(threading.Thread):
    """Every few seconds: is every referenced row still in TQ? (Publishers also ask, for each row, right
    before they drop its last reference; the driver asks once more at the end.)"""

    def __init__(self, tq: JobTq, truth: GroundTruth, every_s: float, switches: ActorSwitches) -> None:
        super().__init__(name="checker", daemon=True)
        self._tq, self._truth, self._every_s, self._switches = tq, truth, every_s, switches
        self.checks = 0

    def run(self) -> None:
        try:
            while not self._switches.stop.wait(self._every_s):
                self.check("periodic check")
        except Exception as exc:
            log.exception("checker crashed")
            self._switches.errors.append(f"checker: {type(exc).__name__}: {exc}")

    def check(self, detected_by: str) -> None:
        referenced = self._truth.referenced_rows()  # before the listing ...
        present = self._tq.keys(STAGING)
        self.checks += 1
        for key, epoch in referenced.items():
            # ... and after it, in the same state: referenced all along, so deleted while referenced
            if key not in present and self._truth.still_referenced(key, epoch):
                found = self._truth.violation(key, detected_by)
                if found is not None:
                    log.error("REFERENCED ROW DELETED: %s (last move %s)", key, found.last_move)
