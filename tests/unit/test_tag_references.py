from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from tq_gc.config import TagReference
from tq_gc.errors import ReferenceSourceError, StoreUnavailable
from tq_gc.references.tags import TagsSource
from tq_gc.rows import Identity, RowId, Tags, rows_of
from tq_gc.stores.memory import MemoryRowStore

DATA, STAGING = "rollout_data", "rollout_staging"
ROUTE_PLAN = TagReference(
    partition=DATA, key_path="route_assembly_plan.cleanup_staging_keys", target_partition=STAGING
)


def store_with(rows: dict[str, dict[str, Tags | None]]) -> MemoryRowStore:
    store = MemoryRowStore()
    for partition, tagged in rows.items():
        for key, tags in tagged.items():
            store.put(partition, key, tags)
    return store


def staging(*keys: str) -> frozenset[RowId]:
    return frozenset(RowId(STAGING, key) for key in keys)


def plan(*keys: str, **extra: Any) -> dict[str, Any]:
    return {"route_assembly_plan": {"cleanup_staging_keys": list(keys), **extra}, "weight_version": 3}


class RecordingStore(MemoryRowStore):
    """Counts list_rows calls, and fails them on the partitions it is told to."""

    def __init__(self, failing: Sequence[str] = ()) -> None:
        super().__init__()
        self.listed: list[str] = []
        self._failing = set(failing)

    def list_rows(self, partition: str) -> dict[str, Tags]:
        self.listed.append(partition)
        if partition in self._failing:
            raise StoreUnavailable(f"kv_list({partition!r}) timed out")
        return super().list_rows(partition)


class BrokenStore(RecordingStore):
    def list_rows(self, partition: str) -> dict[str, Tags]:
        raise ConnectionResetError("controller actor died")

    def identities(self, partition: str, keys: Sequence[str]) -> dict[str, Identity]:
        raise AssertionError("a reference source only lists")


def test_is_a_reference_source() -> None:
    source = TagsSource([ROUTE_PLAN], store_with({DATA: {"g1_g0": None}}))
    assert source.name == "tags"
    assert rows_of(source.read()) == frozenset()


def test_a_tag_partition_the_store_lacks_fails_the_source() -> None:
    """A typo or a renamed partition must not read as "nothing references anything"."""
    store = store_with({"rollout_dta": {"g1_g0": plan("a")}})
    with pytest.raises(ReferenceSourceError, match=r"partition 'rollout_data' .* does not exist") as caught:
        TagsSource([ROUTE_PLAN], store).read()
    assert caught.value.source == "tags"
    with pytest.raises(ReferenceSourceError, match="does not exist"):
        TagsSource([ROUTE_PLAN], store).read(listed={DATA: {}}, existing=["rollout_dta"])


def test_a_partition_emptied_by_its_job_still_exists() -> None:
    store = store_with({DATA: {"g1_g0": plan("a")}})
    store.delete(DATA, ["g1_g0"])
    assert rows_of(TagsSource([ROUTE_PLAN], store).read()) == frozenset()


@pytest.mark.parametrize(
    "data_rows",
    [{}, {"g1_g0": {"weight_version": 3}}, {"g1_g0": plan()}],
    ids=["empty-partition", "path-resolves-nowhere", "empty-plans"],
)
def test_when_empty_abort_fails_when_the_reference_names_no_row(data_rows: dict[str, Tags]) -> None:
    expected = ROUTE_PLAN.model_copy(update={"when_empty": "abort"})
    store = store_with({DATA: {"seed": None, **data_rows}})
    with pytest.raises(ReferenceSourceError, match=r"names no row .* when_empty: abort"):
        TagsSource([expected], store).read()
    store.put(DATA, "g2_g0", plan("r1/c1"))
    assert rows_of(TagsSource([expected], store).read()) == staging("r1/c1")


@pytest.mark.parametrize(
    ("data_rows", "expected"),
    [
        ({"g1_g0": plan("r1/c1", "r1/c2")}, staging("r1/c1", "r1/c2")),
        ({"g1_g0": plan("a"), "g1_g1": plan("b", "a"), "g2_g0": plan()}, staging("a", "b")),
        ({"g1_g0": {"weight_version": 3}, "g1_g1": {}, "g1_g2": None}, staging()),
        ({"g1_g0": {"route_assembly_plan": None}}, staging()),
        ({"g1_g0": {"route_assembly_plan": {"other": ["x"]}}}, staging()),
        ({"g1_g0": {"route_assembly_plan": {"cleanup_staging_keys": "solo"}}}, staging("solo")),
        (
            {"g1_g0": {"route_assembly_plan": json.dumps({"cleanup_staging_keys": ["a", "b"]})}},
            staging("a", "b"),
        ),
        ({"g1_g0": {"route_assembly_plan": {"cleanup_staging_keys": json.dumps(["a"])}}}, staging("a")),
        ({"g1_g0": {"route_assembly_plan": {"cleanup_staging_keys": [["a"], ["b"]]}}}, staging("a", "b")),
        ({"g1_g0": {"route_assembly_plan": [plan("a")["route_assembly_plan"], {}]}}, staging("a")),
        ({}, staging()),
    ],
    ids=[
        "one-row",
        "many-rows-overlapping",
        "rows-without-plan",
        "null-plan",
        "plan-without-keys",
        "single-key-string",
        "plan-as-json-string",
        "keys-as-json-string",
        "nested-lists",
        "list-of-plans",
        "empty-partition",
    ],
)
def test_reads_route_plan_cleanup_keys(data_rows: dict[str, Tags | None], expected: frozenset[RowId]) -> None:
    store = store_with({DATA: data_rows, STAGING: {"r1/c1": {"rollout_id": "r1"}}})
    store.put(DATA, "seed", None)  # the partition exists, even when the case lists no row
    assert rows_of(TagsSource([ROUTE_PLAN], store).read()) == expected


def test_only_the_configured_partition_is_read() -> None:
    store = store_with({DATA: {"g1_g0": plan("a")}, "other": {"x": plan("not-me")}})
    assert rows_of(TagsSource([ROUTE_PLAN], store).read()) == staging("a")


def test_several_references_share_one_listing_per_partition() -> None:
    store = RecordingStore()
    store.put(DATA, "g1_g0", plan("a") | {"lineage": {"keys": ["b"]}})
    store.put("scratch", "s1", {"needs": "c"})
    lineage = TagReference(partition=DATA, key_path="lineage.keys", target_partition="archive")
    scratch = TagReference(partition="scratch", key_path="needs", target_partition=STAGING)
    assert rows_of(TagsSource([ROUTE_PLAN, lineage, scratch], store).read()) == staging("a", "c") | {
        RowId("archive", "b")
    }
    assert sorted(store.listed) == ["rollout_data", "scratch"]


def test_a_listing_from_the_collector_replaces_listing_again() -> None:
    store = RecordingStore()
    store.put(DATA, "g1_g0", plan("stale"))
    store.put("scratch", "s1", {"needs": "c"})
    scratch = TagReference(partition="scratch", key_path="needs", target_partition=STAGING)
    source = TagsSource([ROUTE_PLAN, scratch], store)
    assert source.partitions == [DATA, "scratch"]
    assert rows_of(source.read(listed={DATA: {"g1_g0": plan("fresh")}, STAGING: {}})) == staging("fresh", "c")
    assert store.listed == ["scratch"]


@pytest.mark.parametrize(
    ("store", "message"),
    [
        (RecordingStore(failing=[DATA]), r"listing partition 'rollout_data' failed: StoreUnavailable"),
        (
            BrokenStore(),
            r"listing partition 'rollout_data' failed: ConnectionResetError\('controller actor died'",
        ),
    ],
    ids=["store-unavailable", "any-exception"],
)
def test_a_store_failure_fails_the_source(store: MemoryRowStore, message: str) -> None:
    store.put(DATA, "g1_g0", plan("a"))
    with pytest.raises(ReferenceSourceError, match=message) as caught:
        TagsSource([ROUTE_PLAN], store).read()
    assert caught.value.source == "tags"


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        ({"route_assembly_plan": {"cleanup_staging_keys": 5}}, r"cleanup_staging_keys is int 5"),
        ({"route_assembly_plan": {"cleanup_staging_keys": ["a", {"k": "b"}]}}, r"\[1\] is an object"),
        ({"route_assembly_plan": {"cleanup_staging_keys": {"a": 1}}}, r"is an object, expected a key"),
        ({"route_assembly_plan": "not json"}, r"\$\.route_assembly_plan is a string that is not valid JSON"),
        ({"route_assembly_plan": 7}, r"\$\.route_assembly_plan is int 7, expected an object"),
        ({"route_assembly_plan": {"cleanup_staging_keys": "[truncated"}}, r"not valid JSON"),
        ({"route_assembly_plan": {"cleanup_staging_keys": "[" * 100_000}}, r"nested too deeply"),
        ({"route_assembly_plan": "[" * 900 + '"k"' + "]" * 900}, r"nested too deeply"),
    ],
    ids=[
        "number",
        "object-in-list",
        "object",
        "plan-not-json",
        "plan-number",
        "keys-truncated-json",
        "keys-json-bomb",
        "plan-deep-json",
    ],
)
def test_a_malformed_tag_fails_the_source_naming_the_row(tags: Tags, message: str) -> None:
    store = store_with({DATA: {"g1_g0": plan("ok"), "g9_g3": tags}})
    with pytest.raises(ReferenceSourceError, match=message) as caught:
        TagsSource([ROUTE_PLAN], store).read()
    assert caught.value.source == "tags"
    assert (
        "row rollout_data/g9_g3: tag path 'route_assembly_plan.cleanup_staging_keys'" in caught.value.detail
    )


def test_a_malformed_tag_in_a_pre_listed_partition_also_fails() -> None:
    source = TagsSource([ROUTE_PLAN], BrokenStore())
    with pytest.raises(ReferenceSourceError, match="g1_g0"):
        source.read(
            listed={DATA: {"g1_g0": {"route_assembly_plan": {"cleanup_staging_keys": 1}}}}, existing=[DATA]
        )
