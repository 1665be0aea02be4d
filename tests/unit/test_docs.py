"""What the documents say against what the repository has: they cite only files it has, the README's
CLI synopsis names every command and option `tq-gc --help` lists, and the README's rules are
docs/safety.md's, in the same order."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import click

from tq_gc.cli.commands import cli

ROOT = Path(__file__).resolve().parents[2]


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    return [
        ROOT / name for name in listed if (ROOT / name).is_file() and not name.startswith("bench/results/")
    ]


def test_nothing_cites_a_design_document_the_repository_does_not_have() -> None:
    absent = "DESIGN" + ".md"  # spelled apart, so that this file does not cite it
    assert not (ROOT / absent).exists()
    citing = []
    for path in tracked_text_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        citing += [
            f"{path.relative_to(ROOT)}:{n}" for n, line in enumerate(text.splitlines(), 1) if absent in line
        ]
    assert not citing, f"cite docs/ instead: {citing}"


def readme_synopsis() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("\n## CLI\n") :]
    return section[section.index("```") : section.index("```", section.index("```") + 3)]


def test_the_readme_synopsis_names_every_command_and_option_the_cli_has() -> None:
    synopsis = readme_synopsis()
    missing = []
    for option in cli.params:
        missing += [
            name
            for name in option.opts
            if name.startswith("--") and name != "--help" and name not in synopsis
        ]
    assert isinstance(cli, click.Group)
    for name, command in cli.commands.items():
        line = next((line for line in synopsis.splitlines() if line.startswith(f"tq-gc {name} ")), None)
        if line is None:
            missing.append(f"tq-gc {name}")
            continue
        for param in command.params:
            if getattr(param, "hidden", False):  # a test's option, not the user's
                continue
            opts = [opt for opt in param.opts if opt.startswith("--") and opt != "--help"]
            missing += [f"tq-gc {name} {opt}" for opt in opts if opt not in line]
    assert not missing, f"the README's CLI synopsis lacks {missing}"


def rule_titles(markdown: str) -> list[str]:
    return re.findall(r"^\s*\d+\. \*\*([^*]+)\*\*", markdown, flags=re.MULTILINE)


def test_the_readme_numbers_the_rules_as_docs_safety_does() -> None:
    safety = (ROOT / "docs" / "safety.md").read_text()
    rules = safety[safety.index("## The rules") : safety.index("## The moves protocol")]
    readme = (ROOT / "README.md").read_text()
    brief = readme[readme.index("## How it stays safe") :]
    brief = brief[: brief.index("\n## ", 3)]
    in_full = [title.rstrip(":").strip() for title in rule_titles(rules)]
    in_brief = [title.rstrip(":").strip() for title in rule_titles(brief)]
    assert len(in_full) == 11, in_full
    assert in_brief == in_full


def test_bench_results_holds_only_what_docs_performance_cites_and_every_cited_result_exists() -> None:
    cited_pattern = re.compile(r"bench/results/[\w.-]+\.jsonl")
    performance = (ROOT / "docs" / "performance.md").read_text()
    kept = {f"bench/results/{path.name}" for path in (ROOT / "bench" / "results").glob("*.jsonl")}
    uncited = sorted(kept - set(cited_pattern.findall(performance)))
    assert not uncited, f"experiment logs leave bench/results/ (git keeps them): {uncited}"
    missing = []
    for path in tracked_text_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        missing += [
            f"{path.relative_to(ROOT)}: {cited}"
            for cited in cited_pattern.findall(text)
            if not (ROOT / cited).is_file()
        ]
    assert not missing, f"cites a result file bench/results/ does not have: {missing}"
