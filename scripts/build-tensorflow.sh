#!/usr/bin/env bash
# Build ringleader:tensorflow: ringleader:latest plus TensorFlow (CPU), idempotently.
#
#   scripts/build-tensorflow.sh              both steps: wheelhouse, build
#   scripts/build-tensorflow.sh wheelhouse   only the host wheelhouse build/wheelhouse-tensorflow/
#   scripts/build-tensorflow.sh build        only the docker build (needs the wheelhouse)
#
# Needs ringleader:latest (`make image`). No PyPI inside the build: the host downloads
# tensorflow-cpu and every wheel it needs into build/wheelhouse-tensorflow/wheels, which is the
# whole docker build context (about 400 MB); the image installs from it with --no-index.
#
# Environment:
#   IMAGE=ringleader:tensorflow        tag to build
#   RINGLEADER_IMAGE=ringleader:latest image whose runtime (ringleader-stage/...:runtime) gets
#                                      TensorFlow, then ringleader on top
#   PYTHON=python3                     host CPython 3.11 that downloads the wheelhouse
#   REBUILD_WHEELS=1                   download the wheelhouse again even if it looks up to date
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

IMAGE=${IMAGE:-ringleader:tensorflow}
RINGLEADER_IMAGE=${RINGLEADER_IMAGE:-ringleader:latest}
PYTHON=${PYTHON:-python3}
WHEELHOUSE=build/wheelhouse-tensorflow
LOG=build/docker-build-tensorflow.log
TF_VERSION=2.21.0

export PIP_DISABLE_PIP_VERSION_CHECK=1
# shellcheck source=scripts/lib-images.sh
source scripts/lib-images.sh

step_wheelhouse() {
    require_python311
    local key
    key=$({ printf 'tensorflow-cpu==%s\n' "$TF_VERSION"; "$PYTHON" -V 2>&1; } | sha256sum | cut -d' ' -f1)
    cached_wheelhouse "$WHEELHOUSE" "$key" "The TensorFlow wheelhouse" tensorflow_wheels
}

tensorflow_wheels() {
    log "Downloading tensorflow-cpu==$TF_VERSION and the wheels it needs (cp311, manylinux x86_64)"
    download_wheels "$1/wheels" "tensorflow-cpu==$TF_VERSION"
}

step_build() {
    docker info >/dev/null 2>&1 || die "Docker Engine does not answer; run 'scripts/setup.sh docker'"
    local start=$SECONDS runtime frameworks key
    local -a args
    runtime=$(stage_tag "$RINGLEADER_IMAGE" runtime)
    frameworks=$(stage_tag "$IMAGE" frameworks)
    image_exists "$runtime" || die "$runtime (ringleader's runtime) is not built; run 'make image' first"
    [[ -f $WHEELHOUSE/.key ]] || die "no wheelhouse in $WHEELHOUSE; run '$0 wheelhouse'"
    log "Building image $IMAGE: $runtime plus TensorFlow, then ringleader (log: $LOG; about 2 minutes)"
    args=(-f Dockerfile.tensorflow --build-arg RUNTIME_IMAGE="$runtime" --build-arg TF_VERSION="$TF_VERSION")
    key=$(inputs_key Dockerfile.tensorflow "$WHEELHOUSE" "$runtime" "${args[@]}")
    build_unless_unchanged "$frameworks" "$LOG" "$key" "${args[@]}" "$WHEELHOUSE"
    with_ringleader "$IMAGE" "$frameworks" "${LOG%.log}-ringleader.log"
    log "Image $IMAGE built in $((SECONDS - start))s ($(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%d MB", $1 / 1e6}'))"
}

declare -A STEP_ALIASES=([all]="wheelhouse build")
run_steps "$@"
