"""The soak: a real TQ, real Redis and Ray, make-before-break publishers, orphan leakers, three sweepers
and chaos, for N minutes; then one verdict line. See tools/soak/__init__.py."""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .driver import Soak, SoakBroken
from .interrupts import terminated_cleanly
from .settings import SoakSettings

log = logging.getLogger("soak")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/soak", description=__doc__)
    parser.add_argument("--minutes", type=float, required=True, help="how long the chaos lasts")
    parser.add_argument("--seed", type=int, default=None, help="seeds every random choice (default: random)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, manifests)")
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    if args.seed is None:
        args.seed = random.randrange(10**6)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    log.setLevel(logging.INFO)
    settings = SoakSettings(minutes=args.minutes, seed=args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="tqgc-soak-"))
    log.info("seed %d, work directory %s", settings.seed, workdir)
    soak = Soak(settings, workdir)
    try:
        with terminated_cleanly(soak.switches.errors):
            verdict = soak.run()
    except SoakBroken as exc:
        print(f"soak: broken, no verdict: {exc}")
        return 2
    except Exception as exc:  # the soak could not run (a refused config, Ray not starting): no verdict
        log.exception("the soak itself failed")
        print(f"soak: broken, no verdict: {type(exc).__name__}: {exc}".splitlines()[0])
        return 2
    details_path = workdir / "soak-details.json"
    details_path.write_text(json.dumps(verdict.details, indent=2, default=str))
    for name in (
        "rows",
        "moves",
        "publishers",
        "leaker",
        "redis_restarts",
        "cli_kills",
        "sweeps_by_sweeper",
        "rows_deleted_by_sweeper",
        "reasons",
        "violations_by_last_move",
        "journal",
        "load_average",
    ):
        log.info("%s: %s", name, verdict.details[name])
    if verdict.passed and not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        log.info("details (every violation with its row's history): %s", details_path)
    print(verdict.line(), flush=True)
    return 0 if verdict.passed else 1
