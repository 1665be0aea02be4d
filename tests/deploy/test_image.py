"""The Dockerfile and .dockerignore, read offline: the builder runs the one install recipe with torch in a
layer of its own, the runtime stage is the venv and a non-root user, and the build needs nothing but its
base image and the package indexes (no BuildKit frontend image)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tq_gc.stores.transferqueue.internals import READ_FROM

from .dockerfile import (
    commands,
    copy_sources,
    dockerfile_stages,
    dockerfile_text,
    dockerignored,
    pattern_regex,
    pyproject,
    substitute,
)
from .kustomize import RAY, ROOT

CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
INSTALLERS = {"pip", "pip3", "uv", "poetry", "pipx", "conda", "mamba", "apt-get", "apt", "apk", "yum", "dnf"}
INSTALL_NEEDS = {"pyproject.toml", "README.md", "scripts/install.sh", "tq_gc/"}


def test_dockerfile_has_a_builder_and_a_runtime_stage_on_the_same_image() -> None:
    builder, runtime = dockerfile_stages()
    assert builder.alias == "builder"
    assert builder.base == runtime.base == "python:3.11-slim"


def test_no_syntax_directive_so_air_gapped_builds_need_no_frontend_image() -> None:
    directives = [line for line in dockerfile_text().splitlines() if re.match(r"#\s*syntax\s*=", line)]
    assert directives == [], "`# syntax=` makes BuildKit pull a frontend image from a registry"


def test_the_builder_runs_the_install_script_and_installs_nothing_on_its_own() -> None:
    builder, _ = dockerfile_stages()
    assert {command for run in builder.all("RUN") for command in commands(run)} == {"scripts/install.sh"}
    assert not [run for run in builder.all("RUN") if re.search(r"-m\s+pip|\binstall\b(?!\.sh)", run)]


def test_the_readme_and_the_image_install_with_the_same_script() -> None:
    assert "scripts/install.sh" in (ROOT / "README.md").read_text()


def test_the_builder_installs_a_regular_copy_with_cpu_torch_into_opt_venv() -> None:
    env = dockerfile_stages()[0].key_values("ENV")
    assert env["TQGC_VENV"] == "/opt/venv"
    assert env["TQGC_EDITABLE"] == "0", "an editable install does not survive leaving the source behind"
    assert env["TORCH_INDEX_URL"] == CPU_TORCH_INDEX


def test_the_builder_copies_only_what_the_install_needs_and_dockerignore_lets_it_through() -> None:
    builder, _ = dockerfile_stages()
    sources = [source for rest in builder.all("COPY") for source in copy_sources(rest)]
    assert set(sources) == INSTALL_NEEDS
    assert pyproject()["project"]["readme"] in sources, "setuptools needs the readme pyproject names"
    for source in sources:
        probe = source + "probe.py" if source.endswith("/") else source
        assert not dockerignored(probe), f"COPY {source} but .dockerignore excludes it"


def test_torch_is_a_layer_that_only_the_install_script_invalidates() -> None:
    builder, _ = dockerfile_stages()
    torch_run = builder.index("RUN", "--torch-only")
    before = builder.instructions[:torch_run]
    copied = [source for kw, rest in before if kw == "COPY" for source in copy_sources(rest)]
    assert copied == ["scripts/install.sh"], "a source change must not rebuild the torch layer"
    args_before = {rest.split("=")[0] for kw, rest in before if kw == "ARG"}
    for arg in ("RAY_VERSION", "TQ_VERSION"):
        assert arg not in args_before, "an ARG declared before a RUN invalidates it when it changes"
    assert builder.index("RUN", "scripts/install.sh") == torch_run
    assert builder.all("RUN")[-1].endswith("scripts/install.sh"), "then the full install, after the source"


def test_the_ray_version_is_a_build_argument_the_install_script_reads() -> None:
    builder, _ = dockerfile_stages()
    assert builder.run_env({"RAY_VERSION": "2.51.0"})["RAY_VERSION"] == "2.51.0"
    assert "RAY_VERSION" in (ROOT / "scripts" / "install.sh").read_text()


def test_the_tq_version_is_a_build_argument_the_install_script_pins_and_defaults_to_the_newest_read() -> None:
    builder, _ = dockerfile_stages()
    assert builder.run_env({"TQ_VERSION": "0.1.9"})["TQ_VERSION"] == "0.1.9"
    assert builder.key_values("ARG")["TQ_VERSION"] == READ_FROM[-1]
    assert "transferqueue==$TQ_VERSION" in (ROOT / "scripts" / "install.sh").read_text()


def test_the_default_ray_is_the_example_clusters() -> None:
    rayjob = yaml.safe_load((RAY / "rayjob.yaml").read_text())
    cluster_ray = rayjob["spec"]["rayClusterSpec"]["rayVersion"]
    assert dockerfile_stages()[0].key_values("ARG")["RAY_VERSION"] == cluster_ray


def test_the_runtime_stage_is_the_venv_and_a_non_root_user() -> None:
    builder, runtime = dockerfile_stages()
    venv = builder.key_values("ENV")["TQGC_VENV"]
    assert runtime.all("COPY") == [f"--from=builder {venv} {venv}"]
    assert {c for run in runtime.all("RUN") for c in commands(run)} <= {"groupadd", "useradd"}
    assert not INSTALLERS & {c for run in runtime.all("RUN") for c in commands(run)}
    user = runtime.last("USER").split(":")
    assert user[0].isdigit() and int(user[0]) != 0, "numeric and non-root, so runAsNonRoot can verify it"
    assert all(part.isdigit() and int(part) != 0 for part in user)
    assert "tq-gc" in pyproject()["project"]["scripts"]
    assert json.loads(runtime.last("ENTRYPOINT")) == [f"{venv}/bin/tq-gc"]
    assert json.loads(runtime.last("CMD")) == ["--help"]


def test_the_runtime_stage_labels_and_python_env() -> None:
    runtime = dockerfile_stages()[-1]
    labels = runtime.key_values("LABEL")
    for key in ("title", "description", "version", "source"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    assert labels["org.opencontainers.image.version"] == pyproject()["project"]["version"]
    assert "${VERSION" in next(rest for rest in runtime.all("LABEL") if "image.version" in rest)
    env = runtime.key_values("ENV")
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["PYTHONUNBUFFERED"] == "1"


@pytest.mark.parametrize("given", ["", "0.1.0"])
def test_the_version_label_falls_back_to_the_package_version(given: str) -> None:
    """`--build-arg VERSION="$(git describe --tags)"` in a repo without tags passes an empty string."""
    labels = dockerfile_stages()[-1].key_values("LABEL", {"VERSION": given})
    assert labels["org.opencontainers.image.version"] == pyproject()["project"]["version"]


def test_a_given_version_is_the_label() -> None:
    labels = dockerfile_stages()[-1].key_values("LABEL", {"VERSION": "v1.2.3-4-gabc"})
    assert labels["org.opencontainers.image.version"] == "v1.2.3-4-gabc"


def test_the_substitution_of_this_test_follows_the_dockerfile_rules() -> None:
    assert substitute("${A:-d}/${B:-d}/${C:-d}/$A/${B}", {"A": "a", "B": ""}) == "a/d/d/a/"
    assert substitute("$UNSET ${UNSET}", {}) == "$UNSET ${UNSET}"


# --------------------------------------------------------------------------------------------------------
# .dockerignore


def test_dockerignore_semantics_of_this_test() -> None:
    assert pattern_regex("**/__pycache__").match("__pycache__")
    assert pattern_regex("**/__pycache__").match("a/b/__pycache__")
    assert not pattern_regex("*").match("a/b")


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".git/HEAD",
        ".pytest_cache/v/cache/nodeids",
        ".mypy_cache/3.11/tq_gc/config.data.json",
        ".ruff_cache/CACHEDIR.TAG",
        ".hypothesis/examples/x",
        "tests/unit/test_deploy.py",
        "tests/deploy/test_image.py",
        "tq_gc/__pycache__/config.cpython-311.pyc",
        "tq_gc/stores/__pycache__/memory.cpython-311.pyc",
        "tq_gc.egg-info/PKG-INFO",
        "deploy/k8s/base/cronjob.yaml",
        "bench/run.py",
        "scripts/test",
        "scripts/bench",
    ],
)
def test_dockerignore_keeps_out(path: str) -> None:
    assert dockerignored(path)


def test_dockerignore_lets_in_the_source_and_the_install_recipe() -> None:
    wanted = ["pyproject.toml", "README.md", "scripts/install.sh"]
    wanted += [
        str(p.relative_to(ROOT)) for p in (ROOT / "tq_gc").rglob("*.py") if "__pycache__" not in p.parts
    ]
    assert [path for path in wanted if dockerignored(path)] == []
