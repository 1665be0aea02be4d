"""Config of the reference sources read from files and rows: manifests, tag references, and a scope
entry's owner rule (and the owner reference the owners source reads from it)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from tq_gc.config.base import Frozen
from tq_gc.formats.globs import Pattern
from tq_gc.formats.keypath import split_key_path
from tq_gc.formats.keytemplate import KeyTemplate
from tq_gc.formats.manifest_formats import FORMATS, FormatName
from tq_gc.formats.manifest_formats import NEMO_RL_STAGING_PARTITION as NEMO_RL_STAGING_PARTITION

# What a source reading as empty means: `abort` the sweep whenever it does (a source that always names
# rows: an empty one is a wrong path or an unmounted volume); `abort_if_it_had_rows` (the default) only
# when it named rows at the last sweep; `accept` never (the job may really drop every reference).
WhenEmpty = Literal["abort", "abort_if_it_had_rows", "accept"]


class EmptinessRule(Frozen):
    """The one emptiness setting every file or row source has."""

    when_empty: WhenEmpty = "abort_if_it_had_rows"

    @property
    def expect_nonempty(self) -> bool:
        """Reading as empty at any sweep fails the source."""
        return self.when_empty == "abort"

    @property
    def may_become_empty(self) -> bool:
        """Reading as empty after naming rows is no failure."""
        return self.when_empty == "accept"


def compile_key_pattern(key_pattern: str) -> re.Pattern[str]:
    """The compiled pattern (re caches it), or ValueError saying why it does not compile."""
    try:
        return re.compile(key_pattern)
    except re.error as exc:
        raise ValueError(f"{key_pattern!r} is not a regular expression ({exc})") from None


class ManifestSource(EmptinessRule):
    glob: str = Field(min_length=1)
    format: FormatName = "native"  # formats/manifest_formats.py: what a source of each needs
    key_path: str | None = None
    partition: str | None = None
    # A larger file fails the source: a runaway or wrong file must not exhaust the sweeper's memory.
    max_file_bytes: ClassVar[int] = 64 * 2**20
    # What a healthy source looks like: a file the volume carries under the glob's base (an empty mount
    # point lacks it).
    marker: str | None = Field(default=None, min_length=1)

    @property
    def source_id(self) -> str:
        """How sweeps, the state store and `--accept-empty` name this source."""
        return f"manifests:{self.glob}"

    @property
    def base(self) -> str:
        """The glob's literal directory prefix (`/ckpt` of `/ckpt/**/gc-manifest.json`)."""
        return Pattern.parse(self.glob).base

    @field_validator("glob")
    @classmethod
    def _absolute_file_pattern(cls, glob: str) -> str:
        if not os.path.isabs(glob):
            raise ValueError(
                f"{glob!r} is relative, so it would be read from whatever directory tq-gc runs in: "
                "use an absolute path, such as /ckpt/**/gc-manifest.json"
            )
        if glob.rsplit("/", 1)[-1] in ("", "**"):
            raise ValueError(
                f"{glob!r} matches directories: end it with a file name pattern, "
                "such as /ckpt/**/gc-manifest.json"
            )
        return glob

    @model_validator(mode="after")
    def _fields_fit_format(self) -> ManifestSource:
        partition = FORMATS[self.format].fitted_partition(self.glob, self.key_path, self.partition)
        if partition != self.partition:
            object.__setattr__(self, "partition", partition)
        self._check_marker()
        return self

    def _check_marker(self) -> None:
        if self.marker is not None:
            parts = self.marker.split("/")
            if os.path.isabs(self.marker) or ".." in parts or "" in parts:
                raise ValueError(
                    f"marker {self.marker!r}: name a file under the glob's base directory {self.base!r}, "
                    "relative and without '..', such as .tq-gc-volume"
                )


class TagReference(EmptinessRule):
    partition: str = Field(min_length=1)
    key_path: str = Field(min_length=1)
    target_partition: str = Field(min_length=1)

    @property
    def source_id(self) -> str:
        """How sweeps, the state store and `--accept-empty` name this source."""
        return f"tag_references:{self.partition}:{self.key_path}:{self.target_partition}"

    @field_validator("key_path")
    @classmethod
    def _well_formed_key_path(cls, key_path: str) -> str:
        split_key_path(key_path)  # a malformed path would abort every sweep later: refuse it now
        return key_path


class Owner(Frozen):
    """A scope entry's owner rule: a row in scope is referenced while its owner row exists in the same
    partition (Kubernetes' ownerReferences). `key` is a template over the entry's key_pattern's named
    groups (`{uid}`), checked against the pattern by the entry (ScopeEntry). It has no emptiness setting:
    see OwnerReference.when_empty."""

    key: str
    # The owner row counts only while this tag is true on it: verl's prompt rows carry is_prompt, and a
    # status put (kv_put creates a missing key) can bring a cleared prompt row back as a row without it.
    has_tag: str | None = Field(default=None, min_length=1)

    @field_validator("key")
    @classmethod
    def _key_is_a_template(cls, key: str) -> str:
        KeyTemplate.parse(key)  # a malformed template would abort every sweep later: refuse it now
        return key

    def check_key_fits(self, key_pattern: str | None) -> None:
        """ValueError unless `key` names only (and at least one of) `key_pattern`'s named groups."""
        if key_pattern is None:
            raise ValueError(
                "owner: the owner's key is a template over the entry's key_pattern's named groups, such as "
                "'{uid}' of '^(?P<uid>[^_]+)_\\d+$': give the entry a key_pattern (prefixes and all_keys "
                "have no groups to fill it)"
            )
        template = KeyTemplate.parse(self.key)
        named = compile_key_pattern(key_pattern).groupindex
        unknown = [group for group in template.groups if group not in named]
        if unknown:
            raise ValueError(
                f"owner.key: {self.key!r} names {', '.join(map(repr, unknown))}, not a named group of "
                f"key_pattern {key_pattern!r} (its groups: {', '.join(named) or 'none'})"
            )
        if not template.groups:
            raise ValueError(
                f"owner.key: {self.key!r} uses no group of key_pattern, so every row would have the same "
                "owner: write a template such as '{uid}'"
            )


@dataclass(frozen=True, slots=True)
class OwnerReference:
    """One scope entry's owner rule as the owners source reads it (Config.owner_references): the rows of
    `partition` matching `key_pattern` are referenced while their owner row, keyed by `owner.key`, exists
    in that partition. While the row store does not have the partition there is no row to keep or to
    delete, and the rule names nothing."""

    partition: str
    key_pattern: str
    owner: Owner

    @property
    def source_id(self) -> str:
        """How sweeps, the state store and `--accept-empty` name this source (as when owner rules were a
        section of their own: an existing state store's records still apply)."""
        return f"owner_references:{self.partition}:{self.key_pattern}"

    # Always accept: the owner rows come from the same listing as the rows they protect, so an empty
    # owner set is the job releasing them (verl's sampling clears every prompt row at once), never a
    # failed read (a listing that fails raises, and a partition listed empty has no candidates either).
    when_empty: ClassVar[WhenEmpty] = "accept"
    expect_nonempty: ClassVar[bool] = False
    may_become_empty: ClassVar[bool] = True
