"""Config of the reference sources read from files and rows: manifests, tag references, owner references."""

from __future__ import annotations

import os
import re
from typing import ClassVar, Literal

from pydantic import Field, PrivateAttr, field_validator, model_validator

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
    # point lacks it), and the mount point the base must be on (os.path.ismount).
    marker: str | None = Field(default=None, min_length=1)
    mount_point: str | None = Field(default=None, min_length=1)

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
        self._check_health_options()
        return self

    def _check_health_options(self) -> None:
        if self.marker is not None:
            parts = self.marker.split("/")
            if os.path.isabs(self.marker) or ".." in parts or "" in parts:
                raise ValueError(
                    f"marker {self.marker!r}: name a file under the glob's base directory {self.base!r}, "
                    "relative and without '..', such as .tq-gc-volume"
                )
        if self.mount_point is not None:
            mount_point = os.path.normpath(self.mount_point)
            if mount_point == "/":
                raise ValueError("mount_point '/' is always mounted: name the volume's own mount point")
            if not os.path.isabs(mount_point) or os.path.commonpath([mount_point, self.base]) != mount_point:
                raise ValueError(
                    f"mount_point {self.mount_point!r} must be the glob's base directory {self.base!r} or "
                    "one of its parents (the volume the manifests are on)"
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


class OwnerReference(EmptinessRule):
    """Rows of `partition` referenced while their owner row exists in `owner_partition`.

    The owner's key comes from the row's key (`key_pattern`, whose named groups fill `owner_key`) or
    from one of its tags (`owner_tag`). A row the pattern does not match, or without the tag, is left
    to the other rules."""

    partition: str = Field(min_length=1)
    key_pattern: str | None = None
    owner_key: str | None = None
    owner_tag: str | None = Field(default=None, min_length=1)
    owner_partition: str | None = Field(default=None, min_length=1)
    # The owner row counts only while this tag is true on it: verl's prompt rows carry is_prompt, and a
    # status put (kv_put creates a missing key) can bring a cleared prompt row back as a row without it.
    owner_has_tag: str | None = Field(default=None, min_length=1)
    # The stack creates this partition on its first write (verl's `val` at its first validation): while
    # it does not exist the rule names nothing, instead of failing the sweep as a typo would. Only where
    # rows and owners share the partition: then its absence leaves no row to keep or to delete. Said once,
    # on the partition's scope entry (Config marks its owner references).
    _created_by_stack: bool = PrivateAttr(default=False)

    @property
    def created_by_stack(self) -> bool:
        return self._created_by_stack

    def mark_created_by_stack(self) -> None:
        """The partition's scope entry says the stack creates it: quiet while absent (see above)."""
        if self.owners_in != self.partition:
            raise ValueError(
                f"created_by_stack: the owners of {self.partition!r} are in {self.owners_in!r}, and an "
                "absent owner partition would leave every row of an existing one unreferenced; it keeps "
                "an absent partition quiet only where rows and owners share it"
            )
        self._created_by_stack = True

    @property
    def source_id(self) -> str:
        """How sweeps, the state store and `--accept-empty` name this source."""
        rule = f"owner_tag={self.owner_tag}" if self.owner_tag is not None else self.key_pattern
        return f"owner_references:{self.partition}:{rule}"

    @field_validator("key_pattern")
    @classmethod
    def _compiles(cls, key_pattern: str | None) -> str | None:
        if key_pattern is not None:
            compile_key_pattern(key_pattern)
        return key_pattern

    @model_validator(mode="after")
    def _one_way_to_the_owner(self) -> OwnerReference:
        if (self.key_pattern is None) == (self.owner_tag is None):
            raise ValueError(
                f"owner reference for partition {self.partition!r} needs exactly one of `key_pattern` "
                "(with `owner_key`) or `owner_tag`"
            )
        if self.owner_tag is not None:
            if self.owner_key is not None:
                raise ValueError("owner_key: only a key_pattern fills a template; with owner_tag drop it")
        else:
            self._check_owner_key()
        if self.owner_partition is None:
            object.__setattr__(self, "owner_partition", self.partition)
        return self

    def _check_owner_key(self) -> None:
        if self.owner_key is None:
            raise ValueError("owner_key: key_pattern needs a template for the owner's key, such as '{uid}'")
        try:
            template = KeyTemplate.parse(self.owner_key)
        except ValueError as exc:
            raise ValueError(f"owner_key: {exc}") from None
        named = compile_key_pattern(self.key_pattern or "").groupindex
        unknown = [group for group in template.groups if group not in named]
        if unknown:
            raise ValueError(
                f"owner_key: {self.owner_key!r} names {', '.join(map(repr, unknown))}, not a named group "
                f"of key_pattern {self.key_pattern!r} (its groups: {', '.join(named) or 'none'})"
            )
        if not template.groups:
            raise ValueError(
                f"owner_key: {self.owner_key!r} uses no group of key_pattern, so every row would have "
                "the same owner: write a template such as '{uid}'"
            )

    @property
    def owners_in(self) -> str:
        """The partition the owner rows live in (the validator fills in the default)."""
        return self.owner_partition or self.partition
