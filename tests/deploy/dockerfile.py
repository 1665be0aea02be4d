"""The Dockerfile and .dockerignore read offline, the way the builder reads them (no engine needed)."""

from __future__ import annotations

import functools
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from typing import Any

from .kustomize import ROOT


@dataclass
class Stage:
    base: str
    alias: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str:
        found = self.all(keyword)
        assert found, f"stage {self.alias or self.base}: no {keyword}"
        return found[-1]

    def key_values(self, keyword: str, build_args: dict[str, str] | None = None) -> dict[str, str]:
        """ENV, ARG or LABEL of this stage, merged in order, with ARG defaults (or `build_args`, as
        `--build-arg` gives them) substituted."""
        given = build_args or {}
        args: dict[str, str] = {}
        merged: dict[str, str] = {}
        for kw, rest in self.instructions:
            if kw == "ARG":
                declared = {k: given.get(k, v) for k, v in _key_values(rest).items()}
                args.update(declared)
                if keyword == "ARG":
                    merged.update(declared)
            elif kw == keyword:
                merged.update({k: substitute(v, args) for k, v in _key_values(rest).items()})
        return merged

    def run_env(self, build_args: dict[str, str] | None = None) -> dict[str, str]:
        """The environment the stage's last RUN sees: its ARGs (as `--build-arg` gives them), then ENV."""
        return {**self.key_values("ARG", build_args), **self.key_values("ENV", build_args)}

    def index(self, keyword: str, contains: str = "") -> int:
        """Position of the first `keyword` instruction whose text contains `contains`."""
        for position, (kw, rest) in enumerate(self.instructions):
            if kw == keyword and contains in rest:
                return position
        raise AssertionError(f"stage {self.alias or self.base}: no {keyword} containing {contains!r}")


def _key_values(rest: str) -> dict[str, str]:
    """`K=V K2="V 2"` (ENV, LABEL, ARG) as a dict; a bare `K` maps to ""."""
    pairs = (word.split("=", 1) if "=" in word else (word, "") for word in shlex.split(rest))
    return {key: value for key, value in pairs}


def substitute(text: str, values: dict[str, str]) -> str:
    """Dockerfile variable substitution: $V, ${V}, ${V:-default} (default when V is unset or empty)."""

    def one(match: re.Match[str]) -> str:
        name = match[1] or match[4]
        if match[2] is not None:  # ${V:-default}
            return values.get(name) or match[3]
        return values.get(name, match[0])

    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}|\$(\w+)", one, text)


def dockerfile_text() -> str:
    return (ROOT / "Dockerfile").read_text()


def dockerfile_instructions() -> list[tuple[str, str]]:
    logical = re.sub(r"\\\n(?:[ \t]*#.*\n)*", " ", dockerfile_text())  # comment lines in continuations drop
    instructions = []
    for line in logical.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            keyword, _, rest = stripped.partition(" ")
            instructions.append((keyword.upper(), re.sub(r"\s+", " ", rest).strip()))
    return instructions


def dockerfile_stages() -> list[Stage]:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, rest in dockerfile_instructions():
        if keyword == "FROM":
            words = substitute(rest, global_args).split()
            alias = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], alias=alias))
        elif stages:
            stages[-1].instructions.append((keyword, rest))
        elif keyword == "ARG":
            global_args.update(_key_values(rest))
    return stages


def commands(run: str) -> list[str]:
    """The programs a RUN line starts (its words after any --mount/--network flags)."""
    shell = re.sub(r"^(--\S+\s+)*", "", run)
    return [part.split()[0] for part in re.split(r"&&|\|\||;|\|", shell) if part.split()]


def copy_sources(rest: str) -> list[str]:
    """The sources of one COPY instruction (its words but flags and the destination)."""
    return [word for word in shlex.split(rest) if not word.startswith("--")][:-1]


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


# --------------------------------------------------------------------------------------------------------
# .dockerignore, evaluated as Docker does: the last matching pattern wins; a pattern matching a parent
# directory matches everything below it; `!` re-includes.


def pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1].replace("[!", "[^"), end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


@functools.cache
def _dockerignore_rules() -> tuple[tuple[bool, re.Pattern[str]], ...]:
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negate = line.startswith("!")
            pattern = re.sub(r"/+$", "", line.removeprefix("!").strip()).removeprefix("/")
            rules.append((negate, pattern_regex(pattern)))
    return tuple(rules)


def dockerignored(path: str) -> bool:
    parts = path.split("/")
    candidates = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for negate, regex in _dockerignore_rules():
        if any(regex.match(candidate) for candidate in candidates):
            excluded = not negate
    return excluded
