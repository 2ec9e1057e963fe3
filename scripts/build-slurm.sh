#!/usr/bin/env bash
# Build ringleader:slurm (Dockerfile.slurm): ringleader:horovod plus Debian bookworm's Slurm 22.05
# (slurmctld, slurmd, the client commands) and MUNGE, the node image of the Slurm test cluster
# (scripts/slurm-cluster.sh). Idempotent: an unchanged Dockerfile and node script are a cached
# build of a few seconds.
#
#   scripts/build-slurm.sh          the docker build
#
# Needs ringleader:horovod (`make image-horovod`) and the Debian mirror (nothing from PyPI). The
# build context is scripts/slurm-node.sh alone, so nothing else of the repository is sent.
#
# Environment:
#   IMAGE=ringleader:slurm             tag to build
#   BASE_IMAGE=ringleader:horovod      image to add Slurm to
#   NO_CACHE=1                         docker build --no-cache (a cold build, e.g. to time it)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

IMAGE=${IMAGE:-ringleader:slurm}
BASE_IMAGE=${BASE_IMAGE:-ringleader:horovod}
LOG=build/docker-build-slurm.log

# shellcheck source=scripts/lib-images.sh
source scripts/lib-images.sh

step_build() {
    docker info >/dev/null 2>&1 || die "Docker Engine does not answer; run 'scripts/setup.sh docker'"
    image_exists "$BASE_IMAGE" || die "$BASE_IMAGE is not built; run 'make image-horovod' first"
    local start=$SECONDS context
    mkdir -p build
    context=$(mktemp -d build/.context-slurm.XXXXXX)
    CONTEXT_DIR=$context
    trap 'rm -rf "$CONTEXT_DIR"' EXIT
    mkdir -p "$context/scripts"
    cp -p scripts/slurm-node.sh "$context/scripts/"
    cp Dockerfile.slurm "$context/Dockerfile"
    local -a extra=()
    [[ ${NO_CACHE:-} != 1 ]] || extra+=(--no-cache)
    log "Building image $IMAGE from $BASE_IMAGE (log: $LOG; a few seconds cold: apt-get install of about 4 MB, Slurm and MUNGE)"
    build_image "$IMAGE" "$LOG" "${extra[@]}" --build-arg BASE_IMAGE="$BASE_IMAGE" "$context"
    rm -rf "$context"
    trap - EXIT
    log "Image $IMAGE built in $((SECONDS - start))s ($(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%d MB", $1 / 1e6}')): $(docker run --rm --entrypoint slurmd "$IMAGE" -V)"
}

declare -A STEP_ALIASES=([all]="build")
run_steps "$@"
