"""Start tq-gc's sidecar actor in this Ray cluster, then run the training command beside it.

    python start_sidecar.py gc.yaml [--metrics-port N] [--duty-cycle F] [--change-journal] -- \
        python train.py --your-args

(rayjob.yaml's entrypoint passes --metrics-port 9464, the port its pods expose.) The sidecar sweeps on
gc.yaml's `schedule` for as long as this driver lives, which is as long as the training command runs. In
your own driver, the two lines marked below are all it takes.
"""

import argparse
import subprocess
import sys

import ray

import tq_gc

USAGE = (
    "usage: start_sidecar.py CONFIG.yaml [--metrics-port N] [--duty-cycle F] [--change-journal] -- "
    "TRAINING COMMAND..."
)


def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """This script's own arguments (before `--`), and the training command (after it)."""
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        sys.exit(USAGE)
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="start_sidecar.py", usage=USAGE)
    parser.add_argument("config")
    parser.add_argument("--metrics-port", type=int, help="serve the tqgc_* metrics here (default: off)")
    parser.add_argument("--duty-cycle", type=float, default=0.25, help="how hard tq-gc presses on the TQ")
    parser.add_argument(
        "--change-journal",
        action="store_true",
        help="sweeps re-read only the rows changed since the last one (a journal in the TQ controller; off)",
    )
    return parser.parse_args(argv[:split]), argv[split + 1 :]


def main(argv: list[str]) -> int:
    args, command = parse(argv)
    ray.init()  # in a RayJob, RAY_ADDRESS points at the job's own cluster
    # The two lines: tq-gc attaches to the TransferQueue the trainer creates; it never creates or closes one.
    config = tq_gc.load_config(args.config)
    handle = tq_gc.start_sidecar(
        config,
        metrics_port=args.metrics_port,
        duty_cycle=args.duty_cycle,
        change_journal=args.change_journal,
    )
    print(f"tq-gc sidecar started: {handle}", file=sys.stderr)
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
