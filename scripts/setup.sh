#!/usr/bin/env bash
# Prepare everything ringleader's tests and demo need, idempotently (fast when all is in place).
#
#   scripts/setup.sh              all steps: docker, base, wheelhouse, build, browser, sshkeygen,
#                                 sdk3, venv
#   scripts/setup.sh image        the image only (docker + base + wheelhouse + build)
#   scripts/setup.sh venv         the host virtualenv .venv only
#   scripts/setup.sh demo         what `make demo` needs: the image and .venv with the host
#                                 tools (steps in parallel where they can be)
#   scripts/setup.sh STEP...      any of: docker base wheelhouse wheel build browser sshkeygen
#                                 sdk3 venv
#                                 image all (wheel: only the ringleader wheel, in
#                                 build/wheelhouse/ringleader)
#   (browser: Debian's chromium, for the report's screenshot test; sdk3: build/sdk3-venv, a link
#   to a venv with SageMaker Python SDK v3 in ~/.cache/ringleader, for its local-mode tests)
#
# Environment:
#   IMAGE=ringleader:latest        tag of the image to build
#   BASE_IMAGE=debian:bookworm-slim
#                                  base image. With the default, when it is neither present nor
#                                  pullable, a base is built from Debian packages with debootstrap
#                                  and imported as ringleader/base:bookworm. An explicitly set
#                                  BASE_IMAGE must be present or pullable.
#   VENV_EXTRAS=dev                ringleader's extras in .venv: dev (tests and tools) or tools
#   PYTHON=python3                 host CPython 3.11 (same ABI as the image's Debian python3)
#                                  used to build the wheelhouse and the venv
#   REBUILD_WHEELS=1               rebuild the dependency wheels even if they look up to date
#   DEBIAN_MIRROR=http://deb.debian.org/debian
#   DEBIAN_SECURITY_MIRROR=http://deb.debian.org/debian-security
#   DOCKER_WAIT=60 PULL_TIMEOUT=60 REGISTRY_PROBE_TIMEOUT=5 DEBOOTSTRAP_TIMEOUT=900
#                                  bounds, in seconds
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

BASE_IMAGE=${BASE_IMAGE:-}
IMAGE=${IMAGE:-ringleader:latest}
PYTHON=${PYTHON:-python3}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
DEBIAN_SECURITY_MIRROR=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
DOCKER_WAIT=${DOCKER_WAIT:-60}
PULL_TIMEOUT=${PULL_TIMEOUT:-60}
DEBOOTSTRAP_TIMEOUT=${DEBOOTSTRAP_TIMEOUT:-900}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/dockerd.log}
WHEELHOUSE=build/wheelhouse
VENV=.venv
# Fixed timestamp for the ringleader wheel: identical sources give a byte-identical wheel, so
# Docker's layer cache holds across runs (1980-01-01, the earliest time a zip can store).
WHEEL_EPOCH=315532800

export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

# shellcheck source=scripts/lib-images.sh
source scripts/lib-images.sh
# shellcheck source=scripts/lib-venv.sh
source scripts/lib-venv.sh

# --------------------------------------------------------------------------------------- docker
step_docker() {
    if docker info >/dev/null 2>&1; then
        return 0
    fi
    if ! have dockerd || ! have docker; then
        apt_install docker.io docker-compose debootstrap
    fi
    if pgrep -x dockerd >/dev/null 2>&1; then
        log "dockerd is running but not answering yet; waiting up to ${DOCKER_WAIT}s"
    else
        [[ $(id -u) -eq 0 ]] || die "Docker Engine is not running and starting it needs root"
        log "Starting dockerd in the background (log: $DOCKERD_LOG)"
        mkdir -p "$(dirname "$DOCKERD_LOG")"
        # Own session, no stdin: it outlives this script and make/CI, and takes no signals from them.
        setsid dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
    fi
    local deadline=$((SECONDS + DOCKER_WAIT))
    until docker info >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            tail -n 20 "$DOCKERD_LOG" >&2 2>/dev/null || true
            die "Docker Engine did not answer 'docker info' within ${DOCKER_WAIT}s (see $DOCKERD_LOG)"
        fi
        sleep 0.5
    done
    log "Docker Engine is up: $(docker version --format 'server {{.Server.Version}}')"
}

# ----------------------------------------------------------------------------------------- base
# Sets BASE_IMAGE to the base the image is built from (scripts/lib-images.sh: choose_base).
step_base() { choose_base bookworm; }

# ----------------------------------------------------------------------------------- wheelhouse
# What the dependency wheels depend on: ringleader's declared dependencies and the Python ABI.
deps_key() {
    "$PYTHON" - <<'EOF'
import hashlib, json, platform, sys, sysconfig, tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)["project"]
key = {
    "dependencies": sorted(project.get("dependencies", [])),
    "compare": sorted(project.get("optional-dependencies", {}).get("compare", [])),
    "stacks": sorted(project.get("optional-dependencies", {}).get("stacks", [])),
    "requires-python": project.get("requires-python"),
    "python": list(sys.version_info[:2]),
    "platform": sysconfig.get_platform(),
    "machine": platform.machine(),
}
print(hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest())
EOF
}

step_wheelhouse() {
    require_python311
    cached_wheelhouse "$WHEELHOUSE/deps" "$(deps_key)" "The dependency wheels" dependency_wheels
    step_wheel
}

# dependency_wheels DIR: ringleader's dependencies as wheels (pip wheel, sdists built here).
dependency_wheels() {
    log "Building the dependency wheels (pip wheel, $("$PYTHON" -V 2>&1))"
    # With the extra `compare`: the image also carries sagemaker-training for the benchmarks;
    # with `stacks`: py-spy, in the venv's bin (on the image's PATH), for a hung rank's stacks.
    # A fixed SOURCE_DATE_EPOCH: the wheels built from sdists come out the same in every
    # clone, so the image's dependency layer stays in the build cache.
    if ! SOURCE_DATE_EPOCH=$WHEEL_EPOCH "$PYTHON" -m pip wheel --quiet --wheel-dir "$1" '.[compare,stacks]' 2>"$1.pip.log"; then
        cat "$1.pip.log" >&2
        die "pip wheel failed"
    fi
    rm -f "$1.pip.log" "$1"/ringleader-*.whl
}

# The ringleader wheel (`make wheel`: what `pip install ringleader-*.whl` takes in any image) is
# always rebuilt, from a clean setuptools build dir (build/lib would otherwise keep modules
# deleted from src/).
step_wheel() {
    local app=$WHEELHOUSE/ringleader start=$SECONDS
    log "Building the ringleader wheel into $app"
    rm -rf "$app" build/lib build/bdist.*
    if ! SOURCE_DATE_EPOCH=$WHEEL_EPOCH "$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$app" . \
        2>"$WHEELHOUSE/pip-wheel.log"; then
        cat "$WHEELHOUSE/pip-wheel.log" >&2
        die "pip wheel of ringleader failed"
    fi
    log "Built $(basename "$app"/ringleader-*.whl) in $((SECONDS - start))s"
}

# ---------------------------------------------------------------------------------------- build
step_build() {
    local start=$SECONDS logf=build/docker-build.log
    compgen -G "$WHEELHOUSE/deps/*.whl" >/dev/null && compgen -G "$WHEELHOUSE/ringleader/*.whl" >/dev/null ||
        die "no wheelhouse in $WHEELHOUSE; run 'scripts/setup.sh wheelhouse' (or 'image')"
    mkdir -p build
    local runtime
    runtime=$(stage_tag "$IMAGE" runtime)
    log "Building image $IMAGE from $BASE_IMAGE: its runtime $runtime, then ringleader (log: $logf)"
    build_image "$runtime" "$logf" --build-arg BASE_IMAGE="$BASE_IMAGE" .
    with_ringleader "$IMAGE" "$runtime" "${logf%.log}-ringleader.log"
    log "Image $IMAGE built in $((SECONDS - start))s ($(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%d MB", $1 / 1e6}'))"
}

step_browser() {
    # `ringleader report`'s test opens the page in a real headless browser.
    if have chromium; then
        return 0
    fi
    apt_install chromium fonts-liberation
}

step_sshkeygen() {
    # The cluster tests make the stand-in machines' shared ssh key on this host (the image has
    # none: every job makes its own).
    if have ssh-keygen; then
        return 0
    fi
    apt_install openssh-client
}

step_sdk3() {
    # SageMaker Python SDK v3 cannot share a virtualenv with v2 (both are `sagemaker`): the
    # v3 local-mode tests run their jobs with this interpreter (RINGLEADER_SDK3_PYTHON). It needs
    # nothing of this tree, so it lives in a cache outside it (RINGLEADER_CACHE, by default
    # ~/.cache/ringleader), one per requirement and Python, and every clone links to it: a fresh
    # clone on a warm machine skips the 5 minutes of its install.
    local link=build/sdk3-venv requirement='sagemaker>=3,<4' key dir start=$SECONDS
    key=$({ printf '%s\n' "$requirement"; "$PYTHON" -V 2>&1; } | sha256sum | cut -c1-12)
    dir=${RINGLEADER_CACHE:-$HOME/.cache/ringleader}/sdk3-venv-$key
    mkdir -p build "$(dirname "$dir")"
    if [[ ! -f $dir/.ready ]] || ! "$dir/bin/python" -c 'import sagemaker' 2>/dev/null; then
        log "Creating $dir with $requirement (for the SDK v3 local-mode tests)"
        rm -rf "$dir"
        "$PYTHON" -m venv "$dir"
        if ! "$dir/bin/python" -m pip install --quiet "$requirement" >build/pip-sdk3.log 2>&1; then
            tail -n 40 build/pip-sdk3.log >&2
            die "pip install '$requirement' failed (see build/pip-sdk3.log)"
        fi
        touch "$dir/.ready"
        log "SDK v3 virtualenv ready in $((SECONDS - start))s"
    fi
    rm -rf "$link"
    ln -s "$dir" "$link"
    log "SDK v3 virtualenv: $link -> $dir"
}

# ----------------------------------------------------------------------------------------- venv
# .venv with ringleader's VENV_EXTRAS: `dev` (the default: tests, lint, every host tool) or
# `tools` (`make demo`: the host tools alone). A .venv with `dev` also serves `tools`.
step_venv() {
    have "$PYTHON" || die "$PYTHON not found (set PYTHON)"
    local stamp=$VENV/.ringleader-setup.key key start=$SECONDS extras=${VENV_EXTRAS:-dev}
    key=$(venv_key "$PYTHON" "$extras")
    if [[ -x $VENV/bin/python ]] && "$VENV/bin/python" -c '' 2>/dev/null && [[ -f $stamp ]] &&
        [[ $(<"$stamp") == "$key" || ($extras == tools && $(<"$stamp") == $(venv_key "$PYTHON" dev)) ]]; then
        log "Virtualenv $VENV is up to date"
        return 0
    fi
    log "Making $VENV: ringleader (editable) with its [$extras] extras ($("$PYTHON" -V 2>&1))"
    venv_from_cache "$PYTHON" "$VENV" build/pip-venv.log 900 "$extras" ||
        die "the virtualenv $VENV failed"
    printf '%s\n' "$key" >"$stamp"
    log "Virtualenv $VENV ready in $((SECONDS - start))s"
}

# ----------------------------------------------------------------------------------------- demo
# What `make demo` needs: Docker Engine; then the base image (a debootstrap, about a minute, when
# no registry answers) beside the wheels and .venv with the host tools alone; then the image.
step_demo() {
    step_docker
    local base_file pid
    mkdir -p build
    base_file=$(mktemp build/.demo-base.XXXXXX)
    (
        step_base
        printf '%s\n' "$BASE_IMAGE" >"$base_file"
    ) &
    pid=$!
    step_wheelhouse
    VENV_EXTRAS=${VENV_EXTRAS:-tools} step_venv
    wait "$pid" || die "the base image failed (above)"
    BASE_IMAGE=$(<"$base_file")
    rm -f "$base_file"
    step_build
}

# ----------------------------------------------------------------------------------------- main
declare -A STEP_ALIASES=(
    [all]="docker base wheelhouse build browser sshkeygen sdk3 venv"
    [image]="docker base wheelhouse build"
    [build]="docker base build"
    [base]="docker base"
)
run_steps "$@"
