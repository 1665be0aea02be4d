#!/usr/bin/env bash
# Installs tq-gc into a virtualenv. The one install recipe: the README, CI and the Dockerfile all run it.
#   scripts/install.sh          runtime only
#   scripts/install.sh --dev    plus what the tests, linters and benchmarks need
# Env: TQGC_VENV (default .venv), PYTHON (default python3), TORCH_INDEX_URL (a CPU-only wheel index,
# for machines whose default index would serve a CUDA build of torch), TQGC_EDITABLE (default 1; 0 installs
# a regular copy instead of an editable one, so the venv works without the source: the Dockerfile's mode).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${TQGC_VENV:-.venv}
python=${PYTHON:-python3}
extras=""
editable=${TQGC_EDITABLE:-1}
[ "${1:-}" = "--dev" ] && extras="[test]"

# torch is pinned and installed first, CPU build: transferqueue depends on torch, and left to itself
# pip would pull a multi-GB CUDA build.
torch_spec="torch==2.13.0"

# The stamp vouches for an editable install only: a regular copy goes stale with the source, so reinstall.
stamp="$venv/.tq-gc-installed${extras}"
want=$(cat pyproject.toml scripts/install.sh | sha256sum | cut -c1-16)
if [ "$editable" != "0" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi

[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
if [ -n "${TORCH_INDEX_URL:-}" ]; then
  "${pip[@]}" --index-url "$TORCH_INDEX_URL" "$torch_spec"
else
  "${pip[@]}" "$torch_spec"
fi
if [ "$editable" = "0" ]; then
  rm -f "$stamp"  # it no longer describes this venv
  "${pip[@]}" ".${extras}"
else
  "${pip[@]}" -e ".${extras}"
  echo "$want" > "$stamp"
fi
