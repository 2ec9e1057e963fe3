# Shared by the image scripts (setup.sh, build-horovod.sh, build-tensorflow.sh, build-trixie.sh):
# logging, the wheelhouse download for the image's Python and its cache outside the tree, and a
# docker build that shows each step as it starts and removes the images it made obsolete.
# Sourced, not run.

log() { printf '==> %s\n' "$*"; }
die() {
    printf '%s: error: %s\n' "$(basename "$0")" "$*" >&2
    exit 1
}
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# Platform tags of Debian bookworm (glibc 2.36) for x86_64, so the wheels fit the image even when
# the host is a different Linux (trixie's glibc 2.41 runs them too).
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

# download_wheels DEST REQUIREMENT...: binary wheels for CPython WHEEL_PYTHON (default 3.11,
# Debian bookworm's; 3.13 for trixie's) on manylinux x86_64. The host's pip may be any version's.
download_wheels() {
    local dest=$1 version=${WHEEL_PYTHON:-3.11}
    shift
    [[ $version =~ ^3\.[0-9]+$ ]] || die "WHEEL_PYTHON=$version is not a Python version like 3.13"
    local -a platforms
    mapfile -t platforms < <(platform_args)
    if ! "$PYTHON" -m pip download --quiet --dest "$dest" --only-binary=:all: \
        --implementation cp --python-version "$version" --abi "cp${version/./}" --abi abi3 --abi none \
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

# stage_ids LOG: "NAME ID" for each named stage (FROM ... AS NAME) in a classic builder's log: the
# last image the stage made.
stage_ids() {
    awk '/^Step [0-9]+\/[0-9]+ : FROM / { stage = (NF >= 6 && toupper($(NF - 1)) == "AS") ? $NF : "" }
         /^ ---> [0-9a-f]+$/ && stage != "" { last[stage] = $2 }
         END { for (name in last) print name, last[name] }' "$1"
}

# stage_tag IMAGE NAME: the tag of one of IMAGE's stages or intermediate images,
# ringleader-stage/IMAGE:NAME (ringleader:latest's runtime: ringleader-stage/ringleader-latest:runtime).
stage_tag() {
    local image=${1#ringleader-stage/}
    printf 'ringleader-stage/%s:%s\n' "${image//[:\/@]/-}" "$2"
}

# with_ringleader IMAGE FROM LOG: IMAGE is FROM (ringleader's runtime, or it plus a framework)
# with ringleader itself as its last layer (Dockerfile.ringleader, the wheel the only context): a
# change to ringleader rebuilds that layer only, in every image.
with_ringleader() {
    local image=$1 from=$2 log_file=$3 wheels=build/wheelhouse/ringleader
    compgen -G "$wheels/ringleader-*.whl" >/dev/null ||
        die "no ringleader wheel in $wheels; run 'scripts/setup.sh wheelhouse'"
    log "Adding ringleader ($(basename "$wheels"/ringleader-*.whl)) on top: $image"
    build_image "$image" "$log_file" -f Dockerfile.ringleader --build-arg FROM_IMAGE="$from" "$wheels"
}

# build_image IMAGE LOG DOCKER-BUILD-ARGS...: logged_build tagged IMAGE. Each named stage's last
# image is tagged too (stage_tag IMAGE STAGE), so it stays in the build cache whatever else
# removes untagged images. When a tag moves, the image it left is removed with its untagged
# parents (gigabytes per rebuild with the classic builder); only this build's own images, so builds
# running side by side never remove each other's cache.
build_image() {
    local image=$1 log_file=$2 start=$SECONDS old stage id stage_tag before
    local -a superseded=()
    shift 2
    old=$(image_id "$image")
    logged_build "$log_file" "$start" "$@" -t "$image"
    while read -r stage id; do
        stage_tag=$(stage_tag "$image" "$stage")
        before=$(image_id "$stage_tag")
        docker tag "$id" "$stage_tag"
        [[ -z $before || $before == "$(image_id "$stage_tag")" ]] || superseded+=("$before")
    done < <(stage_ids "$log_file")
    [[ -z $old || $old == "$(image_id "$image")" ]] || superseded+=("$old")
    ((${#superseded[@]})) || return 0
    # One still used by a container, or the parent of another build's image, stays.
    local removed=0
    for id in "${superseded[@]}"; do
        docker image rm "$id" >/dev/null 2>&1 && removed=$((removed + 1))
    done
    log "Removed $removed of the ${#superseded[@]} images this build superseded, with their untagged layers"
}

# inputs_key DOCKERFILE CONTEXT "IMAGE..." ARG...: a key of what a build is made of: the
# Dockerfile, the build's arguments, the IDs of the images it starts from, the context's files.
inputs_key() {
    local dockerfile=$1 context=$2 images=$3 image
    shift 3
    {
        cat "$dockerfile"
        printf '%s\n' "$@"
        for image in $images; do image_id "$image"; done
        (cd "$context" && find . -type f -printf '%p %s\n' | sort)
    } | sha256sum | cut -d' ' -f1
}

# build_unless_unchanged IMAGE LOG KEY DOCKER-BUILD-ARGS...: build_image, unless IMAGE exists and
# was built from inputs with KEY (its label ringleader.inputs). The classic builder checksums every
# COPY's source again even when every step is cached: a framework image's COPY --from of hundreds
# of MB took 11 to 46 s of each warm build, on the way to the container tests.
build_unless_unchanged() {
    local image=$1 log_file=$2 key=$3 built
    shift 3
    built=$(docker image inspect --format '{{index .Config.Labels "ringleader.inputs"}}' "$image" 2>/dev/null || true)
    if [[ ${NO_CACHE:-} != 1 && $built == "$key" ]]; then
        log "$image: built from the same inputs before, not rebuilt"
        return 0
    fi
    build_image "$image" "$log_file" --label "ringleader.inputs=$key" "$@"
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

have() { command -v "$1" >/dev/null 2>&1; }

apt_install() {
    [[ $(id -u) -eq 0 ]] || die "need root to install Debian packages: $*"
    have apt-get || die "apt-get not found; install by hand: $*"
    log "Installing Debian packages: $*"
    export NEEDRESTART_SUSPEND=1
    apt-get update -qq
    apt-get install -y -qq "$@" >/dev/null
}

DEBOOTSTRAP_DIR=
cleanup_debootstrap() {
    [[ -n $DEBOOTSTRAP_DIR && -d $DEBOOTSTRAP_DIR ]] || return 0
    # debootstrap mounts /proc and /sys in the target while it works; never delete through them.
    local mnt
    awk -v d="$DEBOOTSTRAP_DIR/" 'index($2, d) == 1 { print $2 }' /proc/mounts | sort -r |
        while read -r mnt; do umount -l "$mnt" || true; done
    rm -rf --one-file-system "$DEBOOTSTRAP_DIR"
    DEBOOTSTRAP_DIR=
}

# build_debootstrap_base RELEASE IMAGE: a minimal Debian RELEASE (bookworm, trixie) root file
# system from Debian's packages, imported as IMAGE, on a host of either release. Uses
# DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR and DEBOOTSTRAP_TIMEOUT (seconds).
build_debootstrap_base() {
    local release=$1 image=$2
    [[ $(id -u) -eq 0 ]] || die "building the base image with debootstrap needs root"
    have debootstrap || apt_install debootstrap
    [[ -e /usr/share/debootstrap/scripts/$release ]] ||
        die "this host's debootstrap does not know Debian $release; update it (apt-get install debootstrap)"
    local mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
    local security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
    DEBOOTSTRAP_DIR=$(mktemp -d "/var/tmp/ringleader-base-$release.XXXXXX")
    trap cleanup_debootstrap EXIT
    local dir=$DEBOOTSTRAP_DIR logf=build/debootstrap-$release.log start=$SECONDS
    mkdir -p build
    log "Building base image $image from Debian packages: debootstrap --variant=minbase $release ($mirror, log: $logf; about a minute)"
    # Progress: debootstrap's own stage lines (I: Retrieving, Validating, Unpacking, Configuring)
    # every 10 s, so a slow mirror shows as such.
    timeout "${DEBOOTSTRAP_TIMEOUT:-900}" debootstrap --variant=minbase "$release" "$dir" "$mirror" >"$logf" 2>&1 &
    local pid=$! last=$SECONDS status=0
    while kill -0 "$pid" 2>/dev/null; do
        if ((SECONDS - last >= 10)); then
            last=$SECONDS
            log "  $(printf '%4ss' $((SECONDS - start))) $(tail -n 1 "$logf" | cut -c1-100)"
        fi
        sleep 1
    done
    wait "$pid" || status=$?
    if ((status != 0)); then
        tail -n 20 "$logf" >&2
        die "debootstrap $release failed (exit $status; see $logf)"
    fi
    cat >"$dir/etc/apt/sources.list" <<SOURCES
deb $mirror $release main
deb $mirror $release-updates main
deb $security $release-security main
SOURCES
    # Like Docker's official Debian images: no package caches; hostname/hosts/resolv.conf are
    # provided by Docker at run time, so none of the host's leak into the image.
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/cache/apt/*.bin "$dir"/var/lib/apt/lists/* \
        "$dir"/var/log/* "$dir"/tmp/* "$dir"/var/tmp/*
    : >"$dir/etc/resolv.conf"
    : >"$dir/etc/hostname"
    log "Importing the root file system as $image"
    tar --numeric-owner -C "$dir" -c . |
        docker import \
            --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            --change 'CMD ["bash"]' \
            - "$image" >/dev/null
    cleanup_debootstrap
    trap - EXIT
    log "Base image $image built in $((SECONDS - start))s"
}

# registry_answers: whether a pull can reach a registry: the daemon has a mirror configured, or
# Docker Hub takes a TCP connection within REGISTRY_PROBE_TIMEOUT (5 s). Where it does not answer,
# a pull would wait its whole bound before the fallback.
registry_answers() {
    local mirrors
    mirrors=$(docker info --format '{{json .RegistryConfig.Mirrors}}' 2>/dev/null || true)
    [[ -n $mirrors && $mirrors != "[]" && $mirrors != "null" ]] && return 0
    timeout "${REGISTRY_PROBE_TIMEOUT:-5}" bash -c ': </dev/tcp/registry-1.docker.io/443' 2>/dev/null
}

try_pull() {
    if ! registry_answers; then
        log "No registry answers (no mirror configured, registry-1.docker.io:443 not within ${REGISTRY_PROBE_TIMEOUT:-5}s): not pulling $1"
        return 1
    fi
    log "Pulling $1 (at most ${PULL_TIMEOUT:-60}s)"
    if timeout "${PULL_TIMEOUT:-60}" docker pull -q "$1" >/dev/null 2>&1; then
        return 0
    fi
    log "Cannot pull $1 (no registry reachable?)"
    return 1
}

# choose_base RELEASE: sets BASE_IMAGE to the Debian RELEASE base an image is built from. An
# explicitly set BASE_IMAGE must be present or pullable. Otherwise debian:RELEASE-slim when
# present, else ringleader/base:RELEASE when an earlier run built it, else debian:RELEASE-slim
# pulled, else ringleader/base:RELEASE built with debootstrap.
choose_base() {
    local release=$1 default="debian:$1-slim" fallback="ringleader/base:$1"
    if [[ -n ${BASE_IMAGE:-} ]]; then
        image_exists "$BASE_IMAGE" || try_pull "$BASE_IMAGE" ||
            die "base image $BASE_IMAGE is not present and cannot be pulled"
    elif image_exists "$default"; then
        BASE_IMAGE=$default
    elif image_exists "$fallback"; then
        BASE_IMAGE=$fallback
    elif try_pull "$default"; then
        BASE_IMAGE=$default
    else
        build_debootstrap_base "$release" "$fallback"
        BASE_IMAGE=$fallback
    fi
    log "Base image: $BASE_IMAGE"
}

# cached_wheelhouse DIR KEY WHAT FILL [ARGS...]: DIR holds what `FILL TMP ARGS...` puts into TMP
# (the wheels downloaded or built for an image), and DIR/.key its KEY. It is filled once per KEY
# in the cache outside the tree (RINGLEADER_CACHE, by default ~/.cache/ringleader; one KEY kept
# per DIR) and copied into each tree as hard links: a fresh clone on a warm machine skips the
# downloads (35-40 s each on these machines). REBUILD_WHEELS=1 fills it again; WHAT names it in
# the log.
cached_wheelhouse() {
    local dir=$1 key=$2 what=$3 fill=$4 cache kept tmp start=$SECONDS
    shift 4
    cache=${RINGLEADER_CACHE:-$HOME/.cache/ringleader}/${dir//\//-}
    kept=$cache/${key:0:16}
    if [[ ${REBUILD_WHEELS:-} != 1 && -f $dir/.key && $(<"$dir/.key") == "$key" ]]; then
        if [[ $dir/.key -ef $kept/.key ]]; then
            log "$what is up to date ($dir)"
            return 0
        fi
        # A wheel built here from an sdist with C code (sagemaker-training) differs in its
        # bytes from build to build: every checkout takes the cache's, so that the images'
        # layers built from them stay the same (this checkout's fills an empty cache).
        if [[ ! -f $kept/.key ]]; then
            mkdir -p "$cache"
            find "$cache" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
            cp -al "$dir" "$kept" 2>/dev/null || cp -a "$dir" "$kept"
        fi
    fi
    if [[ ${REBUILD_WHEELS:-} == 1 || ! -f $kept/.key ]]; then
        mkdir -p "$cache"
        tmp=$(mktemp -d "$cache/.fill.XXXXXX")
        chmod 755 "$tmp"
        "$fill" "$tmp" "$@"
        printf '%s\n' "$key" >"$tmp/.key"
        # Earlier keys and fills that failed (a `die` leaves its directory) go.
        find "$cache" -mindepth 1 -maxdepth 1 ! -path "$tmp" -exec rm -rf {} +
        mv "$tmp" "$kept"
        log "$what ready in $((SECONDS - start))s: $(find "$kept" -name '*.whl' | wc -l) wheels, $(du -sh "$kept" | cut -f1)"
    else
        log "$what from the cache ($kept)"
    fi
    rm -rf "$dir"
    mkdir -p "$(dirname "$dir")"
    cp -al "$kept" "$dir" 2>/dev/null || cp -a "$kept" "$dir"
}
