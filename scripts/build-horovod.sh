#!/usr/bin/env bash
# Build ringleader:horovod (ringleader:latest plus PyTorch (CPU) and Horovod), with
# FRAMEWORK=mxnet ringleader:mxnet (plus MXNet 1.9.1 and Horovod built for MXNet) or, with
# FRAMEWORK=tensorflow, ringleader:tf-horovod (plus TensorFlow (CPU), tf-keras and Horovod built
# for TensorFlow), idempotently.
#
#   scripts/build-horovod.sh              both steps: wheelhouse, build
#   scripts/build-horovod.sh wheelhouse   only the host wheelhouse build/wheelhouse-<framework>/
#   scripts/build-horovod.sh compile      only the compile stage (needs the wheelhouse and the
#                                         base image, not ringleader:latest)
#   scripts/build-horovod.sh build        only the docker build (needs the wheelhouse)
#   FRAMEWORK=mxnet scripts/build-horovod.sh
#   FRAMEWORK=tensorflow scripts/build-horovod.sh
#
# Needs ringleader:latest (`make image`). No PyPI inside the build: the host downloads the
# framework's wheels (torch==2.13.0, the CPU build; or mxnet==1.9.1 with numpy 1.23.5 and scipy
# 1.11.4, the last versions it imports with: it uses numpy.bool, gone in numpy 1.24; or
# tensorflow-cpu==2.21.0 and tf-keras==2.21.0, the Keras 2 API Horovod's Keras layer needs, taken
# without its dependencies: it requires `tensorflow`, which tensorflow-cpu provides), the Horovod
# 0.28.1 sdist and every wheel either needs into build/wheelhouse-<framework>/{wheels,sdist},
# which is the whole docker build context. Dockerfile.horovod (Dockerfile.mxnet,
# Dockerfile.tf-horovod) builds a Horovod wheel in a throw-away stage (Debian's cmake, g++,
# python3-dev; for PyTorch Horovod's C++ standard patched from 14 to 17, which PyTorch >= 2.1
# needs; for TensorFlow its GPU-only XLA ops left out, which no longer compile against
# TensorFlow 2.21) and installs it with the framework into ringleader's venv. The compile stage starts from the base image, not from
# ringleader:latest, so a change to ringleader does not recompile Horovod (about 5 minutes on
# 2 cores); only the install (about a minute) is redone.
#
# Environment:
#   FRAMEWORK=pytorch                  pytorch (ringleader:horovod), mxnet (ringleader:mxnet) or
#                                      tensorflow (ringleader:tf-horovod)
#   IMAGE                              tag to build (default by FRAMEWORK, as above)
#   RINGLEADER_IMAGE=ringleader:latest image whose runtime (ringleader-stage/...:runtime) gets the
#                                      framework and Horovod, then ringleader on top
#   BASE_IMAGE                         base of the compile stage; default: debian:bookworm-slim
#                                      if present, else ringleader/base:bookworm (what
#                                      scripts/setup.sh built ringleader:latest from)
#   PYTHON=python3                     host CPython 3.11 that downloads the wheelhouse
#   REBUILD_WHEELS=1                   download the wheelhouse again even if it looks up to date
#   NO_CACHE=1                         docker build --no-cache (a cold build, e.g. to time it)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

FRAMEWORK=${FRAMEWORK:-pytorch}
RINGLEADER_IMAGE=${RINGLEADER_IMAGE:-ringleader:latest}
PYTHON=${PYTHON:-python3}
HOROVOD_VERSION=0.28.1
TORCH_VERSION=2.13.0
MXNET_VERSION=1.9.1
TF_VERSION=2.21.0
# What the compile stage and the final image install: the framework and its dependencies;
# Horovod's install_requires (setup.py's require_list, cffi included), which its setup_requires
# also wants present at build time (else setuptools would try to download them); setuptools and
# wheel to build it without build isolation.
HOROVOD_NEEDS=(cloudpickle psutil pyyaml packaging "cffi>=1.4.0" setuptools wheel)
NO_DEPS_REQUIREMENTS=()
case $FRAMEWORK in
    pytorch)
        IMAGE=${IMAGE:-ringleader:horovod}
        DOCKERFILE=Dockerfile.horovod
        REQUIREMENTS=("torch==$TORCH_VERSION" "${HOROVOD_NEEDS[@]}" numpy)
        FRAMEWORK_ARGS=(--build-arg TORCH_VERSION="$TORCH_VERSION")
        CHECK='import torch, horovod; print(f"torch {torch.__version__}, horovod {horovod.__version__}")'
        ;;
    mxnet)
        IMAGE=${IMAGE:-ringleader:mxnet}
        DOCKERFILE=Dockerfile.mxnet
        REQUIREMENTS=("mxnet==$MXNET_VERSION" numpy==1.23.5 scipy==1.11.4 "${HOROVOD_NEEDS[@]}")
        FRAMEWORK_ARGS=(--build-arg MXNET_VERSION="$MXNET_VERSION")
        CHECK='import mxnet, horovod; print(f"mxnet {mxnet.__version__}, horovod {horovod.__version__}")'
        ;;
    tensorflow)
        IMAGE=${IMAGE:-ringleader:tf-horovod}
        DOCKERFILE=Dockerfile.tf-horovod
        REQUIREMENTS=("tensorflow-cpu==$TF_VERSION" "${HOROVOD_NEEDS[@]}")
        # tf-keras requires `tensorflow`: taken alone, or pip would add the other TensorFlow wheel.
        NO_DEPS_REQUIREMENTS=("tf-keras==$TF_VERSION")
        FRAMEWORK_ARGS=(--build-arg TF_VERSION="$TF_VERSION")
        CHECK='import tensorflow as tf, tf_keras, horovod; k = tf.keras.Model.__module__.split(".")[0]; print(f"tensorflow {tf.__version__}, tf.keras from {k} {tf_keras.__version__}, horovod {horovod.__version__}")'
        ;;
    *)
        printf 'build-horovod.sh: error: FRAMEWORK must be pytorch, mxnet or tensorflow, not %s\n' "$FRAMEWORK" >&2
        exit 1
        ;;
esac
case $FRAMEWORK in
    pytorch) WHEELHOUSE=build/wheelhouse-horovod ;;
    tensorflow) WHEELHOUSE=build/wheelhouse-tf-horovod ;;
    *) WHEELHOUSE=build/wheelhouse-$FRAMEWORK ;;
esac
LOG=build/docker-build-$(basename "$IMAGE" | tr ':' '-').log

export PIP_DISABLE_PIP_VERSION_CHECK=1
# shellcheck source=scripts/lib-images.sh
source scripts/lib-images.sh

# ----------------------------------------------------------------------------------- wheelhouse
wheelhouse_key() {
    {
        printf '%s\n' "${REQUIREMENTS[@]}" "${NO_DEPS_REQUIREMENTS[@]}" "horovod==$HOROVOD_VERSION"
        "$PYTHON" -V 2>&1
    } | sha256sum | cut -d' ' -f1
}

step_wheelhouse() {
    require_python311
    cached_wheelhouse "$WHEELHOUSE" "$(wheelhouse_key)" "The $FRAMEWORK + Horovod wheelhouse" \
        horovod_wheels
}

# horovod_wheels DIR: the framework's wheels and those it and Horovod need (DIR/wheels), and
# the Horovod sdist (DIR/sdist).
horovod_wheels() {
    local dir=$1 found
    log "Downloading ${REQUIREMENTS[0]} and the wheels it and Horovod need (cp311, manylinux x86_64)"
    download_wheels "$dir/wheels" "${REQUIREMENTS[@]}"
    if ((${#NO_DEPS_REQUIREMENTS[@]})); then
        download_wheels "$dir/wheels" --no-deps "${NO_DEPS_REQUIREMENTS[@]}"
    fi
    log "Downloading the Horovod $HOROVOD_VERSION sdist"
    # (pip prepares the sdist's metadata in an isolated build environment on the host; nothing is
    # compiled here.)
    if ! "$PYTHON" -m pip download --quiet --dest "$dir/sdist" --no-deps --no-binary=:all: \
        "horovod==$HOROVOD_VERSION" 2>"$dir.pip.log"; then
        cat "$dir.pip.log" >&2
        die "pip download of the horovod sdist failed"
    fi
    rm -f "$dir.pip.log"
    if [[ $FRAMEWORK == pytorch ]] && ! compgen -G "$dir/wheels/torch-$TORCH_VERSION+cpu-*.whl" >/dev/null; then
        found=$(cd "$dir/wheels" && ls torch-*)
        die "pip took a torch that is not the CPU build: $found"
    fi
}

# ---------------------------------------------------------------------------------------- build
compile_base() {
    if [[ -n ${BASE_IMAGE:-} ]]; then
        image_exists "$BASE_IMAGE" || die "base image $BASE_IMAGE is not present"
        printf '%s\n' "$BASE_IMAGE"
    elif image_exists debian:bookworm-slim; then
        printf '%s\n' debian:bookworm-slim
    elif image_exists ringleader/base:bookworm; then
        printf '%s\n' ringleader/base:bookworm
    else
        die "no base image for the compile stage; run 'scripts/setup.sh image' (or 'make image') first"
    fi
}

# build_args: what every build of the Dockerfile is given; the compile stage's cache is shared by
# `compile` and `build` only when both give the same.
build_args() {
    local base
    base=$(compile_base)
    BUILD_ARGS=(-f "$DOCKERFILE" --build-arg BASE_IMAGE="$base"
        --build-arg RUNTIME_IMAGE="$(stage_tag "$RINGLEADER_IMAGE" runtime)" "${FRAMEWORK_ARGS[@]}"
        --build-arg HOROVOD_VERSION="$HOROVOD_VERSION")
    [[ ${NO_CACHE:-} != 1 ]] || BUILD_ARGS+=(--no-cache)
    COMPILE_BASE=$base
}

# Only the compile stage (Horovod's wheel), which needs the base image but not ringleader:latest:
# `make test` runs it while ringleader:latest builds; `build` then finds it in the cache.
step_compile() {
    docker info >/dev/null 2>&1 || die "Docker Engine does not answer; run 'scripts/setup.sh docker'"
    [[ -f $WHEELHOUSE/.key ]] || die "no wheelhouse in $WHEELHOUSE; run '$0 wheelhouse'"
    local start=$SECONDS logf=${LOG%.log}-compile.log
    build_args
    log "Compiling Horovod $HOROVOD_VERSION for $FRAMEWORK on $COMPILE_BASE (the compile stage of $DOCKERFILE; log: $logf)"
    logged_build "$logf" "$start" "${BUILD_ARGS[@]}" --target compile "$WHEELHOUSE"
    log "Horovod's compile stage for $FRAMEWORK done in $((SECONDS - start))s"
}

step_build() {
    docker info >/dev/null 2>&1 || die "Docker Engine does not answer; run 'scripts/setup.sh docker'"
    local start=$SECONDS runtime frameworks key
    runtime=$(stage_tag "$RINGLEADER_IMAGE" runtime)
    frameworks=$(stage_tag "$IMAGE" frameworks)
    image_exists "$runtime" || die "$runtime (ringleader's runtime) is not built; run 'make image' first"
    [[ -f $WHEELHOUSE/.key ]] || die "no wheelhouse in $WHEELHOUSE; run '$0 wheelhouse'"
    build_args
    log "Building image $IMAGE: $runtime plus $FRAMEWORK and Horovod $HOROVOD_VERSION compiled on $COMPILE_BASE, then ringleader (log: $LOG; a cold build takes about 8 minutes, 5 of them compiling Horovod)"
    # The context is the wheelhouse only: nothing else is sent to the daemon.
    key=$(inputs_key "$DOCKERFILE" "$WHEELHOUSE" "$COMPILE_BASE $runtime" "${BUILD_ARGS[@]}")
    build_unless_unchanged "$frameworks" "$LOG" "$key" "${BUILD_ARGS[@]}" "$WHEELHOUSE"
    with_ringleader "$IMAGE" "$frameworks" "${LOG%.log}-ringleader.log"
    log "Image $IMAGE built in $((SECONDS - start))s ($(docker image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%d MB", $1 / 1e6}')): $(docker run --rm --entrypoint python "$IMAGE" -c "$CHECK")"
}

declare -A STEP_ALIASES=([all]="wheelhouse build")
run_steps "$@"
