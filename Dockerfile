# tq-gc image:
#   docker build --build-arg VERSION="$(git describe --tags 2>/dev/null)" -t tq-gc .
# Match the training cluster the CronJob joins: Ray Client needs the same Ray version and Python minor
# version on both sides, so pass the cluster's, e.g. --build-arg RAY_VERSION=2.60.0 and
# --build-arg PYTHON_IMAGE=python:3.11-slim (tq-gc says which versions differ when they do). Match the job's
# TransferQueue too, e.g. --build-arg TQ_VERSION=0.1.9 for NeMo RL's: tq-gc's client speaks the job's
# controller's protocol, and refuses (exit 2, naming both versions) a controller of another TQ.
# The builder runs scripts/install.sh, the same recipe the README, CI and developers use, so the image and a
# source install cannot drift. The runtime stage gets only the finished venv: no compiler, no pip cache, no
# source tree, and it runs as an unprivileged user (uid 10001, the uid deploy/k8s pins in runAsUser).

# Both stages must be the same image: the venv's bin/python is a symlink to the base image's interpreter.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
# CPU-only torch (transferqueue depends on torch; the default index would serve a multi-GB CUDA build). Only
# torch itself comes from this index; its dependencies come from the default one (scripts/install.sh).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# TQGC_EDITABLE=0: a regular install, since only /opt/venv (not the source) reaches the runtime stage.
ENV TQGC_VENV=/opt/venv \
    TQGC_EDITABLE=0 \
    TORCH_INDEX_URL=${TORCH_INDEX_URL}
WORKDIR /src
# torch first, in a layer of its own that depends on the install script alone: a source change or another
# Ray version reuses it. (.dockerignore allow-lists the same files the COPYs name.)
COPY scripts/install.sh scripts/install.sh
# The pip cache lives in a BuildKit cache mount: rebuilds reuse the downloaded wheels, and the cache never
# lands in a layer.
RUN --mount=type=cache,target=/root/.cache/pip scripts/install.sh --torch-only
# The Ray of the training cluster this image joins; scripts/install.sh reads it from the environment, as
# RUN sees every ARG. Declared after the torch layer, so that another value does not rebuild that layer.
ARG RAY_VERSION=2.60.0
# The TransferQueue of the job this image sweeps (0.1.9, 0.1.10 or 0.1.11 are tested); read the same way.
ARG TQ_VERSION=0.1.11
COPY pyproject.toml README.md ./
COPY tq_gc/ tq_gc/
RUN --mount=type=cache,target=/root/.cache/pip scripts/install.sh

FROM ${PYTHON_IMAGE}
# The release, e.g. from `git describe --tags`; without one (a repo with no tags) the package's version.
ARG VERSION=0.1.0
ARG SOURCE_URL=https://github.com/tq-gc/tq-gc
LABEL org.opencontainers.image.title="tq-gc" \
      org.opencontainers.image.description="Reclaims orphaned TransferQueue rows in RL training jobs, safely and on a schedule." \
      org.opencontainers.image.version="${VERSION:-0.1.0}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:${PATH}
RUN groupadd --system --gid 10001 tqgc \
 && useradd --system --uid 10001 --gid 10001 --home-dir /home/tqgc --create-home \
        --shell /usr/sbin/nologin tqgc
COPY --from=builder /opt/venv /opt/venv
WORKDIR /home/tqgc
# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
ENTRYPOINT ["/opt/venv/bin/tq-gc"]
CMD ["--help"]
