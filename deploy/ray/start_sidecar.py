"""Start tq-gc's sidecar actor in this Ray cluster, then run the training command beside it.

    python start_sidecar.py gc.yaml -- python train.py --your-args      (rayjob.yaml's entrypoint)

The sidecar sweeps on gc.yaml's `schedule` for as long as this driver lives, which is as long as the
training command runs. In your own driver, the two lines marked below are all it takes.
"""

import subprocess
import sys

import ray

import tq_gc


def main(argv: list[str]) -> int:
    config_path, separator, *command = argv
    if separator != "--" or not command:
        sys.exit("usage: start_sidecar.py CONFIG.yaml -- TRAINING COMMAND...")
    ray.init()  # in a RayJob, RAY_ADDRESS points at the job's own cluster
    # The two lines: tq-gc attaches to the TransferQueue the trainer creates; it never creates or closes one.
    config = tq_gc.load_config(config_path)
    handle = tq_gc.start_sidecar(config)
    print(f"tq-gc sidecar started: {handle}", file=sys.stderr)
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
