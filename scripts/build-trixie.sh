#!/usr/bin/env bash
# Build ringleader:trixie: ringleader in a user's image of another distribution, idempotently.
# Debian trixie's Python 3.13 and Open MPI 5 (PRRTE), the user's packages in the user's own venv
# (/opt/venv, with Debian's python3-mpi4py), ringleader in a venv of its own, prepared the one
# documented way (Dockerfile.trixie: pip install the wheel, `ringleader image setup`).
#
#   scripts/build-trixie.sh              all steps: base, wheelhouse, build
#   scripts/build-trixie.sh base         only the base image (debian:trixie-slim, or built with
#                                        debootstrap as ringleader/base:trixie)
#   scripts/build-trixie.sh wheelhouse   only the host wheelhouse build/wheelhouse-trixie/
#   scripts/build-trixie.sh build        only the docker build (base and wheelhouse first)
#
# Needs the ringleader wheel (`scripts/setup.sh wheelhouse`, which `make image` runs). No PyPI
# inside the build: the host downloads cp313 wheels of ringleader's dependencies and of the
# user's packages into build/wheelhouse-trixie/wheels.
#
# Environment:
#   IMAGE=ringleader:trixie            tag to build
#   BASE_IMAGE                         base image; default as scripts/lib-images.sh choose_base
#   PYTHON=python3                     host Python whose pip downloads the wheels (any version:
#                                      the downloads name Python 3.13 explicitly)
#   USER_PACKAGES="numpy"              the user's packages (in /opt/venv)
#   REBUILD_WHEELS=1                   download the wheelhouse again even if it looks up to date
#   DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR, PULL_TIMEOUT=60, DEBOOTSTRAP_TIMEOUT=900
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

IMAGE=${IMAGE:-ringleader:trixie}
BASE_IMAGE=${BASE_IMAGE:-}
PYTHON=${PYTHON:-python3}
USER_PACKAGES=${USER_PACKAGES:-numpy}
WHEELHOUSE=build/wheelhouse-trixie
APP_WHEELS=build/wheelhouse/ringleader
LOG=build/docker-build-trixie.log

export PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive
# shellcheck source=scripts/lib-images.sh
source scripts/lib-images.sh

# ringleader's declared dependencies (pyproject.toml), one a line, markers included: pip
# evaluates them for Python 3.13.
project_dependencies() {
    "$PYTHON" - <<'PY'
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["project"]["dependencies"]))
PY
}

step_base() {
    docker info >/dev/null 2>&1 || die "Docker Engine does not answer; run 'scripts/setup.sh docker'"
    choose_base trixie
}

step_wheelhouse() {
    local key
    local -a deps
    mapfile -t deps < <(project_dependencies)
    key=$({ printf '%s\n' "${deps[@]}" "$USER_PACKAGES"; } | sha256sum | cut -d' ' -f1)
    cached_wheelhouse "$WHEELHOUSE" "$key" "The trixie wheelhouse" trixie_wheels "${deps[@]}"
}

# trixie_wheels DIR DEPENDENCY...: ringleader's dependencies and the user's packages, for cp313.
trixie_wheels() {
    local dir=$1
    shift
    log "Downloading ringleader's dependencies and $USER_PACKAGES (cp313, manylinux x86_64)"
    # shellcheck disable=SC2086 # USER_PACKAGES is a list
    WHEEL_PYTHON=3.13 download_wheels "$dir/wheels" "$@" $USER_PACKAGES
}

step_build() {
    [[ -n $BASE_IMAGE ]] || die "no base image chosen (internal: step_base must run first)"
    [[ -f $WHEELHOUSE/.key ]] || die "no wheelhouse in $WHEELHOUSE; run '$0 wheelhouse'"
    compgen -G "$APP_WHEELS/ringleader-*.whl" >/dev/null ||
        die "no ringleader wheel in $APP_WHEELS; run 'scripts/setup.sh wheelhouse' (or 'make image')"
    local start=$SECONDS context
    # The build context: the wheelhouse and the ringleader wheel, nothing else of the repository.
    context=$(mktemp -d build/.context-trixie.XXXXXX)
    CONTEXT_DIR=$context
    trap 'rm -rf "$CONTEXT_DIR"' EXIT
    mkdir -p "$context/wheels" "$context/ringleader"
    ln "$WHEELHOUSE"/wheels/*.whl "$context/wheels/" 2>/dev/null || cp "$WHEELHOUSE"/wheels/*.whl "$context/wheels/"
    cp "$APP_WHEELS"/ringleader-*.whl "$context/ringleader/"
    cp Dockerfile.trixie "$context/Dockerfile"
    log "Building image $IMAGE from $BASE_IMAGE (log: $LOG; about 2 minutes cold)"
    build_image "$IMAGE" "$LOG" --build-arg BASE_IMAGE="$BASE_IMAGE" \
        --build-arg USER_PACKAGES="$USER_PACKAGES" "$context"
    rm -rf "$context"
    trap - EXIT
    log "Image $IMAGE built in $((SECONDS - start))s ($(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%d MB", $1 / 1e6}'))"
}

declare -A STEP_ALIASES=([all]="base wheelhouse build" [build]="base build")
run_steps "$@"
