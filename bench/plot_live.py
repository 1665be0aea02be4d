"""Plot the live-traffic benchmark: the job's p99 iteration latency against staging rows, per configuration.

    scripts/bench plot bench/results/live.jsonl --out bench/live_p99.png

Reads the JSON lines `scripts/bench live --out FILE` appended. Left: the job's p99 per configuration;
right: the same over the run's own no-tq-gc p99 (its ratio line), which is what survives a busy machine.
Several runs at the same row count are drawn as their median, with the range as a bar.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

STYLE = {
    "no-tq-gc": ("without tq-gc", "black", "o"),
    "naive-clear": ("naive restore-time clear", "tab:gray", "x"),
    "tq-gc-default": ("tq-gc, default schedule", "tab:blue", "s"),
    "tq-gc-back-to-back": ("tq-gc, back to back (interval 1 s)", "tab:red", "^"),
}


def read_lines(paths: list[Path]) -> list[dict[str, Any]]:
    lines = []
    for path in paths:
        lines.extend(json.loads(text) for text in path.read_text().splitlines() if text.strip())
    return lines


def by_config(lines: list[dict[str, Any]], metric: str) -> dict[str, dict[int, list[float]]]:
    """{config: {rows: [metric of each run]}} from the configuration lines."""
    grouped: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for line in lines:
        if "config" in line:
            grouped[line["config"]][line["rows"]].append(line[metric])
    return grouped


def ratios_by_config(lines: list[dict[str, Any]], metric: str) -> dict[str, dict[int, list[float]]]:
    """{config: {rows: [metric over the run's no-tq-gc, each run]}} from the ratio lines."""
    key = metric.removesuffix("_ms")
    grouped: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for line in lines:
        if "ratio_to" in line:
            grouped[line["ratio_to"]][line["rows"]].append(1.0)
            for config, ratio in line.get(key, {}).items():
                grouped[config][line["rows"]].append(ratio)
    return grouped


def draw(ax: Any, grouped: dict[str, dict[int, list[float]]]) -> None:
    for config, runs in grouped.items():
        label, color, marker = STYLE.get(config, (config, None, "o"))
        rows = sorted(runs)
        medians = [statistics.median(runs[r]) for r in rows]
        low = [m - min(runs[r]) for m, r in zip(medians, rows, strict=True)]
        high = [max(runs[r]) - m for m, r in zip(medians, rows, strict=True)]
        ax.errorbar(rows, medians, yerr=[low, high], label=label, color=color, marker=marker, capsize=3)
    ax.set_xscale("log")
    ax.set_xlabel("staging rows (half of them orphans)")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_ylim(bottom=0)


def plot(lines: list[dict[str, Any]], metric: str, out: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        sys.exit("matplotlib is missing: pip install -e '.[bench]' (scripts/bench plot installs it)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    name = metric.removesuffix("_ms")
    fig, (absolute, relative) = plt.subplots(1, 2, figsize=(12, 4.5))
    draw(absolute, by_config(lines, metric))
    absolute.set_ylabel(f"job loop iteration {name} (ms)")
    absolute.legend(fontsize="small")
    draw(relative, ratios_by_config(lines, metric))
    relative.set_ylabel(f"{name} over the same run's no-tq-gc {name}")
    fig.suptitle("The training job's own TQ traffic (put, get, clear every 50 ms), with and without tq-gc")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "results", nargs="+", type=Path, help="JSON lines written by scripts/bench live --out"
    )
    parser.add_argument("--metric", default="p99_ms", choices=["p50_ms", "p99_ms", "p999_ms", "max_ms"])
    parser.add_argument("--out", type=Path, default=Path("bench/live_p99.png"))
    args = parser.parse_args()
    plot(read_lines(args.results), args.metric, args.out)


if __name__ == "__main__":
    main()
