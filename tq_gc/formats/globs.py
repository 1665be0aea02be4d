"""Absolute glob patterns, split at their base: the literal directory prefix before the first wildcard.

`/ckpt/**/gc-manifest.json` has base `/ckpt` and parts (`**`, `gc-manifest.json`). The config names a
source's volume by its base (marker); references/globwalk.py walks the parts from it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

ANY_DEPTH = "**"
WILDCARD = re.compile(r"[*?[]")


@dataclass(frozen=True, slots=True)
class Pattern:
    """An absolute glob split at its base: `/ckpt/**/x.json` -> base `/ckpt`, parts (`**`, `x.json`)."""

    base: str
    parts: tuple[str, ...]

    @classmethod
    def parse(cls, glob: str) -> Pattern:
        if not os.path.isabs(glob):
            raise ValueError(f"glob {glob!r} is relative: use an absolute path")
        components: list[str] = []
        for component in glob.split("/"):
            if component and not (component == ANY_DEPTH and components[-1:] == [ANY_DEPTH]):
                components.append(component)
        if not components or components[-1] == ANY_DEPTH:
            components.append("*")  # the config refuses such globs; match what `**` holds, not itself
        first_wildcard = next(
            (index for index, component in enumerate(components) if WILDCARD.search(component)),
            len(components) - 1,
        )
        first_wildcard = min(first_wildcard, len(components) - 1)  # the last component names the files
        return cls("/" + "/".join(components[:first_wildcard]), tuple(components[first_wildcard:]))
