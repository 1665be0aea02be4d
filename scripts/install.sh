#!/usr/bin/env bash
# Installs tq-gc into a virtualenv. The one install recipe: the README, CI and the Dockerfile all run it.
#   scripts/install.sh              runtime only
#   scripts/install.sh --dev        plus what the tests, linters and benchmarks need (verl 0.9.1 --no-deps too)
#   scripts/install.sh --torch-only the venv and torch alone: the Dockerfile's first layer, which then stays
#                                   cached while the source changes
# Env:
#   TQGC_VENV        the venv (default .venv)
#   PYTHON           the interpreter that makes it (default python3)
#   TORCH_INDEX_URL  a wheel index serving torch's CPU build, for machines whose default index would serve
#                    the CUDA build. torch alone comes from it (`--index-url ... --no-deps torch==...`): the
#                    index need not mirror torch's dependencies, which come from the default index, and no
#                    other index can offer a torch in its place.
#   RAY_VERSION      the Ray to install (default: the newest tq-gc allows). Anything joining a Ray cluster
#                    (the CronJob's image) needs the cluster's Ray version and Python minor version.
#   TQ_VERSION       the TransferQueue to install (default: the newest tq-gc allows). A venv of another
#                    TQ beside the main one (CI tests each supported TQ) defaults to .venv-tq$TQ_VERSION;
#                    the CronJob's image needs the TQ of the job it sweeps (tq-gc refuses another).
#   TQGC_EDITABLE    default 1; 0 installs a regular copy instead of an editable one, so the venv works
#                    without the source: the Dockerfile's mode.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${TQGC_VENV:-.venv${TQ_VERSION:+-tq$TQ_VERSION}}
python=${PYTHON:-python3}
editable=${TQGC_EDITABLE:-1}
extras=""
torch_only=0
case "${1:-}" in
  "") ;;
  --dev) extras="[test,verl-test]" ;;
  --torch-only) torch_only=1 ;;
  *) echo "usage: scripts/install.sh [--dev | --torch-only]" >&2; exit 2 ;;
esac

# torch is pinned and installed first, CPU build: transferqueue depends on torch, and left to itself pip
# would pull a multi-GB CUDA build. Every later install repeats the pin, so a dependency asking for another
# torch fails the install instead of swapping the CPU build for a CUDA one.
torch_spec="torch==2.13.0"
# [client]: the CronJob joins the training cluster through Ray Client (ray://), which needs grpcio.
ray_spec="ray[client]${RAY_VERSION:+==$RAY_VERSION}"
# --dev: the verl the verl tests drive, without its dependencies (a GPU stack; the extra verl-test has what
# its replay buffer and trainer package import on CPU), so it cannot change torch, ray or transferqueue.
verl_spec="verl==0.9.1"
# Without TQ_VERSION, pyproject's range picks (the newest it allows).
tq_spec=(${TQ_VERSION:+"transferqueue==$TQ_VERSION"})
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
started=$SECONDS

# One line a step, before it: pip itself stays quiet (warnings and errors only), and the install takes
# minutes the first time (torch alone is ~200 MB).
say() { echo "install.sh: $*"; }

install_torch() {
  if [ ! -x "$venv/bin/python" ]; then
    say "creating the virtualenv $venv ($python)"
    "$python" -m venv "$venv"
  fi
  say "installing $torch_spec${TORCH_INDEX_URL:+ from $TORCH_INDEX_URL} and its dependencies (the longest step)"
  if [ -n "${TORCH_INDEX_URL:-}" ]; then
    "${pip[@]}" --index-url "$TORCH_INDEX_URL" --no-deps "$torch_spec"
  fi
  # With TORCH_INDEX_URL: torch's dependencies only, since the torch installed above satisfies the pin.
  "${pip[@]}" "$torch_spec"
}

if [ "$torch_only" = "1" ]; then
  install_torch
  say "done in $((SECONDS - started)) s: torch in $venv"
  exit 0
fi

# The stamp vouches for an editable install only: a regular copy goes stale with the source, so reinstall.
stamp="$venv/.tq-gc-installed${extras}"
want=$( (cat pyproject.toml scripts/install.sh; echo "ray=${RAY_VERSION:-}"; echo "tq=${TQ_VERSION:-}") | sha256sum | cut -c1-16)
if [ "$editable" != "0" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  say "$venv is up to date (nothing changed since the last install)"
  exit 0
fi

install_torch
how=$([ "$editable" = "0" ] && echo "a regular copy" || echo "editable")
say "installing tq-gc${extras} ($how) with $ray_spec and ${tq_spec[*]:-the newest transferqueue it allows}"
if [ "$editable" = "0" ]; then
  rm -f "$stamp"  # it no longer describes this venv
  "${pip[@]}" ".${extras}" "$torch_spec" "$ray_spec" ${tq_spec[@]+"${tq_spec[@]}"}
else
  "${pip[@]}" -e ".${extras}" "$torch_spec" "$ray_spec" ${tq_spec[@]+"${tq_spec[@]}"}
fi
if [ -n "$extras" ]; then
  say "installing $verl_spec without its dependencies (the verl tests drive it)"
  "${pip[@]}" --no-deps "$verl_spec"
fi
if [ "$editable" != "0" ]; then
  echo "$want" > "$stamp"
fi
say "done in $((SECONDS - started)) s: $venv"
