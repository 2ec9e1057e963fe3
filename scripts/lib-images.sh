# Shared by the image scripts (setup.sh, build-horovod.sh, build-tensorflow.sh): logging, the
# wheelhouse download for the image's Python, and a docker build that shows each step as it starts
# and removes the images it made obsolete. Sourced, not run.

log() { printf '==> %s\n' "$*"; }
die() {
    printf '%s: error: %s\n' "$(basename "$0")" "$*" >&2
    exit 1
}
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# Platform tags of Debian bookworm (glibc 2.36) for x86_64, so the wheels fit the image even when
# the host is a different Linux.
platform_args() {
    local minor
    for minor in $(seq 36 -1 5); do
        printf -- '--platform\nmanylinux_2_%s_x86_64\n' "$minor"
    done
    printf -- '--platform\n%s\n' manylinux2014_x86_64 manylinux2010_x86_64 manylinux1_x86_64
}

require_python311() {
    command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found (set PYTHON to a CPython 3.11)"
    "$PYTHON" -c 'import sys; sys.exit(sys.implementation.name != "cpython" or sys.version_info[:2] != (3, 11))' ||
        die "$PYTHON is not CPython 3.11; the image's Debian bookworm python3 is 3.11 and the wheels must match (set PYTHON)"
}

# download_wheels DEST REQUIREMENT...: binary wheels for cp311 on manylinux x86_64.
download_wheels() {
    local dest=$1
    shift
    local -a platforms
    mapfile -t platforms < <(platform_args)
    if ! "$PYTHON" -m pip download --quiet --dest "$dest" --only-binary=:all: \
        --implementation cp --python-version 3.11 --abi cp311 --abi abi3 --abi none \
        "${platforms[@]}" "$@" 2>"$dest.pip.log"; then
        cat "$dest.pip.log" >&2
        die "pip download of the wheels failed"
    fi
    rm -f "$dest.pip.log"
}

# logged_build LOG START DOCKER-BUILD-ARGS...: the full output to LOG, each step shown as it starts.
logged_build() {
    local log_file=$1 start=$2
    shift 2
    : >"$log_file"
    if ! docker build "$@" 2>&1 |
        while IFS= read -r line; do
            printf '%s\n' "$line" >>"$log_file"
            if [[ $line == "Step "* ]]; then
                log "  $(printf '%4ss' $((SECONDS - start))) ${line:0:110}"
            fi
        done; then
        tail -n 60 "$log_file" >&2
        die "docker build failed (see $log_file)"
    fi
}

image_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

# build_image IMAGE LOG DOCKER-BUILD-ARGS...: logged_build tagged IMAGE. When the tag moves, the
# image it leaves and the install stages of earlier builds are untagged leftovers (gigabytes per
# rebuild with the classic builder); the ones older than this build are removed. Every ringleader
# image carries the label ringleader.image (set in Dockerfile's last stage); Horovod's compile
# stage does not, so it stays as the build cache.
build_image() {
    local image=$1 log_file=$2 start=$SECONDS since old freed
    shift 2
    since=$(date +%s)
    old=$(image_id "$image")
    logged_build "$log_file" "$start" "$@" -t "$image"
    [[ -n $old && $old != "$(image_id "$image")" ]] || return 0
    freed=$(docker image prune --force --filter label=ringleader.image --filter "until=$since" | tail -n 1)
    log "Removed the images this build superseded (${freed:-nothing})"
}

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

# run_steps ARG...: the steps named (default: all), each a step_NAME function of the script;
# STEP_ALIASES, an associative array the script declares, names groups of steps ("all" among
# them). Each step runs once, in the order named.
run_steps() {
    local -a steps=() expanded=()
    local arg s total_start=$SECONDS
    for arg in "${@:-all}"; do
        if [[ $arg == -h || $arg == --help || $arg == help ]]; then
            usage
            exit 0
        elif [[ -n ${STEP_ALIASES[$arg]:-} ]]; then
            read -ra expanded <<<"${STEP_ALIASES[$arg]}"
            steps+=("${expanded[@]}")
        elif declare -F "step_$arg" >/dev/null; then
            steps+=("$arg")
        else
            usage >&2
            die "unknown step: $arg"
        fi
    done
    local -A done_steps=()
    for s in "${steps[@]}"; do
        [[ -z ${done_steps[$s]:-} ]] || continue
        done_steps[$s]=1
        "step_$s"
    done
    log "$(basename "$0") done (${steps[*]}) in $((SECONDS - total_start))s"
}
