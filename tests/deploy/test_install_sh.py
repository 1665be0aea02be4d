"""scripts/install.sh: the pip commands it runs (against a fake interpreter that records them), and what it
installs for real (a real venv and pip, against two local wheel indexes standing in for PyTorch's CPU index
and the default index)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pip
import pytest

from .dockerfile import dockerfile_stages
from .kustomize import ROOT

INSTALL_SH = ROOT / "scripts" / "install.sh"
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
REAL_INSTALL_TIMEOUT_S = 240


def run_install(tmp_path: Path, env: dict[str, str], *args: str) -> list[list[str]]:
    """The pip commands install.sh runs, through a fake interpreter that records them."""
    calls, _ = run_install_with_output(tmp_path, env, *args)
    return calls


def run_install_with_output(tmp_path: Path, env: dict[str, str], *args: str) -> tuple[list[list[str]], str]:
    """The pip commands, and what install.sh printed (stdout then stderr), each pip command in it as a
    line `PIP <its arguments>` where it ran."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    log = tmp_path / "pip.log"
    fake = venv / "bin" / "python"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nprintf "PIP %s\\n" "$*"\n')
    fake.chmod(0o755)
    log.write_text("")
    clean_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(
        ["bash", str(INSTALL_SH), *args],
        env={**clean_env, **env, "TQGC_VENV": str(venv)},
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    )
    return [line.split() for line in log.read_text().splitlines()], done.stdout + done.stderr


def test_install_sh_says_what_it_is_doing_one_line_a_step(tmp_path: Path) -> None:
    calls, output = run_install_with_output(tmp_path, {"TORCH_INDEX_URL": CPU_TORCH_INDEX}, "--dev")
    lines = output.splitlines()
    assert len(calls) == 4
    steps = [line for line in lines if not line.startswith("PIP ")]
    assert all(line.startswith("install.sh: ") for line in steps), lines
    assert not lines[0].startswith("PIP "), "a step's line comes before its first pip command"
    said = " ".join(steps)
    for what in ("torch==2.13.0", "tq-gc", "verl==0.9.1", "done"):
        assert what in said, (what, steps)
    assert len(steps) <= len(calls) + 1, "one line a step, not one per pip command and no more"

    again = run_install_with_output(tmp_path, {"TORCH_INDEX_URL": CPU_TORCH_INDEX}, "--dev")
    assert again[0] == []
    assert [line for line in again[1].splitlines() if "up to date" in line], again[1]


def test_install_sh_with_the_builders_env_installs_cpu_torch_then_a_regular_copy(tmp_path: Path) -> None:
    env = dockerfile_stages()[0].run_env()
    calls = run_install(tmp_path, env)
    assert len(calls) == 3
    torch_call, torch_dependencies_call, tq_gc_call = calls
    for call in calls:
        assert call[:3] == ["-m", "pip", "install"]
    assert torch_call[torch_call.index("--index-url") + 1] == CPU_TORCH_INDEX
    assert "--no-deps" in torch_call, "the torch index need not serve torch's dependencies"
    torch_pin = torch_call[-1]
    assert torch_pin.startswith("torch==")
    assert "--index-url" not in torch_dependencies_call
    assert torch_dependencies_call[-1] == torch_pin
    assert "." in tq_gc_call
    assert "-e" not in tq_gc_call
    assert torch_pin in tq_gc_call, "a dependency asking for another torch must fail, not pull a CUDA one"
    assert f"ray[client]=={env['RAY_VERSION']}" in tq_gc_call
    assert f"transferqueue=={env['TQ_VERSION']}" in tq_gc_call, "the job's TQ, from the build argument"


def test_torch_only_installs_torch_alone(tmp_path: Path) -> None:
    calls = run_install(tmp_path, {"TORCH_INDEX_URL": CPU_TORCH_INDEX}, "--torch-only")
    assert [call[-1] for call in calls] == ["torch==2.13.0", "torch==2.13.0"]
    assert not (tmp_path / "venv" / ".tq-gc-installed").exists()


def test_install_sh_default_is_still_editable_and_stamped(tmp_path: Path) -> None:
    first = run_install(tmp_path, {})
    assert "--index-url" not in first[0]
    assert first[-1][first[-1].index("-e") + 1] == "."
    assert "ray[client]" in first[-1], "no RAY_VERSION: the newest Ray tq-gc allows"
    assert run_install(tmp_path, {}) == [], "a second run with nothing changed installs nothing"
    regular = run_install(tmp_path, {"TQGC_EDITABLE": "0"})
    assert "." in regular[-1] and "-e" not in regular[-1]
    again = run_install(tmp_path, {})
    assert again[-1][again[-1].index("-e") + 1] == ".", "the stamp no longer vouches after a copy"


def test_another_ray_version_is_a_reinstall(tmp_path: Path) -> None:
    run_install(tmp_path, {})
    assert "ray[client]==2.51.0" in run_install(tmp_path, {"RAY_VERSION": "2.51.0"})[-1]


def test_a_tq_version_is_pinned_and_another_is_a_reinstall(tmp_path: Path) -> None:
    unpinned = run_install(tmp_path, {})
    assert not any(arg.startswith("transferqueue") for arg in unpinned[-1]), "pyproject's range picks"
    pinned = run_install(tmp_path, {"TQ_VERSION": "0.1.9"})
    assert "transferqueue==0.1.9" in pinned[-1]
    assert run_install(tmp_path, {"TQ_VERSION": "0.1.9"}) == [], "the stamp vouches for the same TQ"
    assert "transferqueue==0.1.10" in run_install(tmp_path, {"TQ_VERSION": "0.1.10"})[-1]


def test_an_unknown_argument_is_a_usage_error(tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", str(INSTALL_SH), "--devv"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert "usage" in result.stderr


# --------------------------------------------------------------------------------------------------------
# For real: a venv, pip, and two local indexes. The toy project stands in for tq-gc (its build backend is
# in-tree, so no index has to serve setuptools); its wheels are made here.

TOY_BACKEND = '''
"""A PEP 517 backend that writes a wheel from pyproject's name, version and dependencies (tests only)."""
import base64, hashlib, pathlib, tomllib, zipfile


def write_wheel(directory, name, version, requires=(), extras=None, files=None):
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    lines = [f"Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {req}" for req in requires]
    for extra, extra_requires in (extras or {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {req}; extra == "{extra}"' for req in extra_requires]
    contents = dict(files or {f"{dist}/__init__.py": ""})
    contents[f"{info}/METADATA"] = "\\n".join(lines) + "\\n"
    contents[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\\nGenerator: toy\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    )
    record = []
    for path, text in contents.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    contents[f"{info}/RECORD"] = "\\n".join([*record, f"{info}/RECORD,,"]) + "\\n"
    filename = f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(pathlib.Path(directory) / filename, "w") as wheel:
        for path, text in contents.items():
            wheel.writestr(path, text)
    return filename


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = tomllib.loads(pathlib.Path("pyproject.toml").read_text())["project"]
    return write_wheel(wheel_directory, project["name"], project["version"], project["dependencies"])


def get_requires_for_build_wheel(config_settings=None):
    return []
'''


def _toy_backend(path: Path) -> ModuleType:
    path.write_text(TOY_BACKEND)
    spec = importlib.util.spec_from_file_location("toy_backend", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _simple_index(root: Path, wheels: dict[str, list[str]]) -> str:
    """A PEP 503 index at `root` ({project: [wheel file names already in root]}); its file:// URL."""
    links = []
    for project, files in wheels.items():
        (root / project).mkdir()
        anchors = "".join(f'<a href="../{name}">{name}</a>' for name in files)
        (root / project / "index.html").write_text(f"<html><body>{anchors}</body></html>")
        links.append(f'<a href="{project}/">{project}</a>')
    (root / "index.html").write_text(f"<html><body>{''.join(links)}</body></html>")
    return root.as_uri()


def _toy_project(root: Path, dependencies: list[str]) -> None:
    deps = ", ".join(f'"{dep}"' for dep in dependencies)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "toy_backend"\nbackend-path = ["."]\n'
        f'[project]\nname = "toyproj"\nversion = "1.0"\ndependencies = [{deps}]\n'
    )


def _installed(venv: Path) -> dict[str, str]:
    site = next(venv.glob("lib/python3*/site-packages"))
    versions = {}
    for info in site.glob("*.dist-info"):
        name, version = info.name.removesuffix(".dist-info").split("-", 1)
        versions[name] = version
    return versions


def _venv_with_this_pip(venv: Path) -> None:
    """A real venv that runs this environment's pip (ensurepip would take 10-15 s of a busy 2-core machine);
    install.sh finds it made and goes on to its pip installs."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    pip_home = venv.parent / "pip-home"
    pip_home.mkdir()
    (pip_home / "pip").symlink_to(Path(pip.__file__).parent)
    site_packages = next(venv.glob("lib/python3*/site-packages"))
    (site_packages / "this-pip.pth").write_text(f"{pip_home}\n")


@pytest.fixture
def toy_world(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A toy checkout (scripts/install.sh + toy project) and the env that points pip at the two indexes."""
    _venv_with_this_pip(tmp_path / "venv")
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    (checkout / "scripts" / "install.sh").write_text(INSTALL_SH.read_text())
    backend = _toy_backend(checkout / "toy_backend.py")
    torch_index, default_index = tmp_path / "torch-index", tmp_path / "default-index"
    torch_index.mkdir()
    default_index.mkdir()
    cpu = backend.write_wheel(torch_index, "torch", "2.13.0+cpu", ["toydep"], files={"torch/build.py": "CPU"})
    default_wheels = {
        # The default index's torch builds stand in for the CUDA ones.
        "torch": [
            backend.write_wheel(default_index, "torch", version, files={"torch/build.py": "CUDA"})
            for version in ("2.13.0", "2.14.0")
        ],
        "toydep": [backend.write_wheel(default_index, "toydep", "1.0")],
        "grpcio": [backend.write_wheel(default_index, "grpcio", "1.0")],
        "ray": [
            backend.write_wheel(default_index, "ray", version, extras={"client": ["grpcio"]})
            for version in ("2.49.0", "2.60.0")
        ],
        "needs-new-torch": [backend.write_wheel(default_index, "needs-new-torch", "1.0", ["torch>=2.14"])],
    }
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PIP_CONFIG_FILE": "/dev/null",  # this machine's pip config must not add indexes or constraints
        "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),
        "PIP_INDEX_URL": _simple_index(default_index, default_wheels),
        "TORCH_INDEX_URL": _simple_index(torch_index, {"torch": [cpu]}),
        "TQGC_VENV": str(tmp_path / "venv"),
        "TQGC_EDITABLE": "0",
        "RAY_VERSION": "2.49.0",
    }
    return checkout, env


def _install(checkout: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(checkout / "scripts" / "install.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=REAL_INSTALL_TIMEOUT_S,
        check=False,
    )


def test_a_real_install_keeps_the_cpu_torch_and_fails_on_a_dependency_wanting_another(
    toy_world: tuple[Path, dict[str, str]],
) -> None:
    checkout, env = toy_world
    venv = Path(env["TQGC_VENV"])
    _toy_project(checkout, ["torch", "ray>=2.40"])
    installed = _install(checkout, env)
    assert installed.returncode == 0, installed.stderr[-3000:]
    versions = _installed(venv)
    assert versions["torch"] == "2.13.0+cpu"
    assert versions["toydep"] == "1.0", "torch's dependency, from the default index"
    assert versions["ray"] == "2.49.0", "RAY_VERSION"
    assert "grpcio" in versions, "ray[client]"

    _toy_project(checkout, ["torch", "ray>=2.40", "needs-new-torch"])
    refused = _install(checkout, env)
    assert refused.returncode != 0, "a dependency wanting a newer torch must fail the install"
    assert "torch" in refused.stderr
    assert _installed(venv)["torch"] == "2.13.0+cpu"
