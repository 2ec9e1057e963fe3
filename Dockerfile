# ringleader training image, without ringleader itself: Debian's Python 3.11, OpenMPI 4.1 and
# OpenSSH, and ringleader's dependencies in a venv (tagged ringleader-stage/ringleader-latest:runtime).
# Dockerfile.ringleader adds ringleader on top, as docs/own-image.md tells users to prepare their
# own image (`pip install ringleader-*.whl && ringleader image setup`, ENTRYPOINT
# ["ringleader-entrypoint"]): that is ringleader:latest. The framework images start from the same
# runtime and add ringleader last the same way, so a change to ringleader rebuilds one small
# layer per image. Build with scripts/setup.sh (or `make image`): it prepares the wheelhouse
# (build/wheelhouse/{deps,ringleader}) on the host, so this build needs no PyPI, only the Debian
# mirror. No `# syntax=` line on purpose: no registry can be reached for a frontend image, and the
# file works with both the classic builder and BuildKit.
#
# Layers, least to most often changed: apt packages -> dependency venv (own stage, so the wheels are
# not kept in the image) -> (Dockerfile.ringleader) the ringleader wheel and `ringleader image
# setup`.

ARG BASE_IMAGE=debian:bookworm-slim

# ---------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS system

# The first instruction after this FROM is this file's own, not an ARG: the classic builder
# takes, among identical layers on one parent, the newest, and the framework images' compile
# stages (the same base, then `ARG DEBIAN_FRONTEND`) built beside this one made this stage miss
# its cache in the next run, and every framework image with it.
RUN export DEBIAN_FRONTEND=noninteractive \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
        python3 python3-venv python3-mpi4py \
        openmpi-bin libopenmpi-dev \
        openssh-server openssh-client \
        iproute2 procps ca-certificates rsync \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/dpkg.log

# ---------------------------------------------------------------------------------------------------
FROM system AS deps

# Every dependency of ringleader (not ringleader itself), py-spy (a hung rank's stacks, the extra
# `stacks`) and sagemaker-training (the runner the benchmarks compare with: the user's own
# packages, as far as ringleader is concerned), built on the host for CPython 3.11.
COPY build/wheelhouse/deps/ /tmp/wheels/
RUN /usr/bin/python3 -m venv --system-site-packages /opt/ringleader/venv \
 && /opt/ringleader/venv/bin/pip install --no-index --find-links /tmp/wheels \
        --no-cache-dir --disable-pip-version-check /tmp/wheels/*.whl

# ---------------------------------------------------------------------------------------------------
FROM system AS runtime

COPY --from=deps /opt/ringleader/venv /opt/ringleader/venv

# On every ringleader image (the framework images start from this stage).
LABEL ringleader.image=ringleader

ENV PATH=/opt/ringleader/venv/bin:$PATH \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1
