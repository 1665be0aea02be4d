"""A reference source that named rows at the last sweep and reads as empty now stops the sweep.

An unmounted volume leaves its empty mount point (no manifest files), a renamed tag field names nothing,
an owner partition misread owns nothing: each would release every row the source protected. The state
store remembers what each source yielded at the last sweep that read them all; a source that yielded
references then and reads as empty now aborts the sweep (exit 4, cause source_failed) until the
operator accepts it (`--accept-empty SOURCE`) or the config says the source may become empty."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tq_gc.cli import EXIT_ABORTED, EXIT_OK, EXIT_USAGE, main
from tq_gc.config import parse_config
from tq_gc.errors import ConfigError
from tq_gc.report import Cause, Outcome, SweepReport
from tq_gc.state import RedisState
from tq_gc.sweep import Collector
from tq_gc.wiring import Runtime

from support.baseline import with_old_baseline
from support.world import DATA, STAGING, World

HELD, ORPHAN = "held/c1", "orphan/c1"
ROUTE_PLAN = {"route_assembly_plan": {"cleanup_staging_keys": [HELD]}}
TAG_SOURCE = "tag_references:rollout_data:route_assembly_plan.cleanup_staging_keys:rollout_staging"
OWNED = r"(?P<group>[^/]+)/c\d+"  # HELD's owner is the row `held`
OWNER_SOURCE = f"owner_references:rollout_staging:{OWNED}"


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def manifest_source(world: World) -> str:
    return f"manifests:{world.tmp_path}/ckpt/**/gc-manifest.json"


def unmount(world: World) -> None:
    """What an unmounted volume leaves: its mount point, an empty directory."""
    shutil.rmtree(world.tmp_path / "ckpt")
    (world.tmp_path / "ckpt").mkdir()


def held_by_a_manifest(world: World) -> None:
    world.rows.put(STAGING, HELD)
    world.rows.put(STAGING, ORPHAN)
    world.write_manifest([HELD])
    first = world.sweep()
    assert first.outcome is Outcome.COMPLETED and first.counts.referenced["manifests"] == 1


def assert_stopped_by(report: SweepReport, source: str) -> None:
    assert (report.outcome, report.cause) == (Outcome.ABORTED, Cause.SOURCE_FAILED), report.reason
    assert report.reason is not None
    assert source in report.reason and "--accept-empty" in report.reason
    assert "when_empty: accept" in report.reason
    assert report.counts.deleted == 0


def test_an_unmounted_volume_stops_every_sweep_instead_of_releasing_its_rows(world: World) -> None:
    held_by_a_manifest(world)
    unmount(world)
    for _ in range(3):
        world.age()
        report = world.sweep()
        assert_stopped_by(report, manifest_source(world))
        assert "named 1 row" in report.reason and "matches no file" in report.reason
    assert world.staging() == {HELD, ORPHAN}


def test_the_message_says_where_the_volume_should_be(world: World) -> None:
    held_by_a_manifest(world)
    unmount(world)
    report = world.sweep()
    assert report.reason is not None
    assert f"{world.tmp_path}/ckpt" in report.reason and "mount" in report.reason


def test_a_volume_unmounted_between_a_sweeps_two_reads_stops_the_next_sweep(world: World) -> None:
    """The sweep that saw the manifests in its first read keeps their rows; the next one stops."""
    held_by_a_manifest(world)
    world.age()
    world.rows.before("list_keys", lambda: unmount(world))  # while listing: after the first read
    during = world.sweep()
    assert during.outcome is Outcome.COMPLETED and during.counts.referenced["manifests"] == 1
    assert_stopped_by(world.sweep(), manifest_source(world))
    assert world.staging() == {HELD}


def test_a_manifest_written_between_a_sweeps_two_reads_is_no_empty_source(world: World) -> None:
    held_by_a_manifest(world)
    unmount(world)
    world.rows.before("list_keys", lambda: world.write_manifest([HELD]))
    assert world.sweep().outcome is Outcome.COMPLETED


def test_accepting_the_empty_source_lets_this_sweep_on_and_the_next_ones(world: World) -> None:
    held_by_a_manifest(world)
    unmount(world)
    assert world.sweep().outcome is Outcome.ABORTED
    accepted = world.sweep(accept_empty=[manifest_source(world)])
    assert accepted.outcome is Outcome.COMPLETED and accepted.counts.deleted == 0
    world.age()
    later = world.sweep()
    assert later.outcome is Outcome.COMPLETED
    assert later.counts.deleted == 2 and world.staging() == set()


def test_accepting_a_source_that_is_not_configured_is_a_usage_error(world: World) -> None:
    with pytest.raises(ConfigError, match=r"manifests:/nowhere.*not a configured reference source"):
        world.sweep(accept_empty=["manifests:/nowhere/*.json"])


def test_a_source_that_accepts_being_empty_releases_its_rows(tmp_path: Path) -> None:
    world = World(
        tmp_path, manifests=[{"glob": f"{tmp_path}/ckpt/**/gc-manifest.json", "when_empty": "accept"}]
    )
    held_by_a_manifest(world)
    unmount(world)
    assert world.sweep().outcome is Outcome.COMPLETED
    world.age()
    assert world.sweep().counts.deleted == 2


def test_retiring_every_manifest_is_believed(world: World) -> None:
    """The files are there and say "release": that is no volume gone missing."""
    held_by_a_manifest(world)
    world.write_manifest([HELD], state="retired")
    assert world.sweep().outcome is Outcome.COMPLETED
    world.age()
    assert world.sweep().counts.deleted == 2


def test_a_source_that_never_named_a_row_is_not_guarded(world: World) -> None:
    world.rows.put(STAGING, ORPHAN)
    world.sweep()
    unmount(world)
    world.age()
    assert world.sweep().counts.deleted == 1


def test_a_renamed_tag_field_stops_the_sweep(world: World) -> None:
    world.rows.put(STAGING, HELD)
    world.rows.put(DATA, "g1_g0", ROUTE_PLAN)
    assert world.sweep().counts.referenced["tags"] == 1
    world.rows.put(DATA, "g1_g0", {"route_plan": {"cleanup_staging_keys": [HELD]}})  # the job renamed it
    world.age()
    report = world.sweep()
    assert_stopped_by(report, TAG_SOURCE)
    assert world.staging() == {HELD}


def test_a_tag_reference_that_accepts_being_empty_releases_its_rows(tmp_path: Path) -> None:
    tags = {"partition": DATA, "key_path": "route_assembly_plan.cleanup_staging_keys"}
    world = World(tmp_path, tag_references=[tags | {"target_partition": STAGING, "when_empty": "accept"}])
    world.rows.put(STAGING, HELD)
    world.rows.put(DATA, "g1_g0", ROUTE_PLAN)
    world.sweep()
    world.rows.delete(DATA, ["g1_g0"])
    world.sweep()
    world.age()
    assert world.sweep().counts.deleted == 1


def owned_world(tmp_path: Path) -> World:
    entry = {"partition": STAGING, "key_pattern": OWNED, "owner": {"key": "{group}"}}
    world = World(tmp_path, scope=[entry])
    world.rows.put(STAGING, "held", {})
    world.rows.put(STAGING, HELD, {})
    assert world.sweep().counts.referenced["owners"] == 1
    return world


def test_owners_that_all_vanish_release_their_rows(tmp_path: Path) -> None:
    """The owner rows come from the same listing as the rows they protect: an empty owner set is the job
    releasing them (verl's sampling clears every prompt row at once), never a failed read (a listing that
    fails raises). Owner rules always accept being empty, under the same source id as before."""
    world = owned_world(tmp_path)
    world.rows.delete(STAGING, ["held"])
    emptied = world.sweep()
    assert emptied.outcome is Outcome.COMPLETED and emptied.counts.referenced["owners"] == 0
    world.age()
    assert world.sweep().counts.deleted == 1
    assert world.state.source_counts().get(OWNER_SOURCE) == 0


def test_a_dry_run_is_stopped_too(world: World) -> None:
    held_by_a_manifest(world)
    unmount(world)
    assert_stopped_by(world.sweep(execute=False), manifest_source(world))


def test_the_counts_live_in_the_shared_store_across_sweepers(tmp_path: Path, redis_url: str) -> None:
    """A CronJob is a new process every run: what the last run saw must come from Redis."""
    world = World(tmp_path)
    config = parse_config(world.config.model_dump() | {"state_url": redis_url})

    def sweep() -> SweepReport:
        state = RedisState.from_url(redis_url, config.namespace)
        try:
            return Collector(config, state, world.rows).sweep(dry_run=False)
        finally:
            state.close()

    seeding = RedisState.from_url(redis_url, config.namespace)
    with_old_baseline(seeding).close()  # a job swept for a while: its empty tag source is judged
    world.rows.put(STAGING, HELD)
    world.write_manifest([HELD])
    assert sweep().outcome is Outcome.COMPLETED
    unmount(world)
    assert_stopped_by(sweep(), manifest_source(world))


class Cli:
    def __init__(self, world: World, capsys: pytest.CaptureFixture[str]) -> None:
        self.world, self.capsys = world, capsys
        self.path = world.tmp_path / "gc.yaml"
        self.path.write_text(yaml.safe_dump(json.loads(world.config.model_dump_json())))

    def sweep(self, *args: str) -> tuple[int, dict[str, Any], str]:
        self.capsys.readouterr()
        argv = ["sweep", "--config", str(self.path), "--json", "--execute", *args]
        code = main(argv, Runtime(self.world.state, self.world.rows))
        out, err = self.capsys.readouterr()
        return code, json.loads(out) if out else {}, err


def test_cli_exits_4_until_the_operator_accepts_the_empty_source(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = Cli(world, capsys)
    held_by_a_manifest(world)
    unmount(world)
    code, report, _ = cli.sweep()
    assert (code, report["cause"]) == (EXIT_ABORTED, "source_failed")
    code, report, _ = cli.sweep("--accept-empty", manifest_source(world))
    assert (code, report["outcome"]) == (EXIT_OK, "completed")
    code, _, err = cli.sweep("--accept-empty", "manifests:/typo/*.json")
    assert code == EXIT_USAGE and "not a configured reference source" in err
    assert world.staging() == {HELD, ORPHAN}
