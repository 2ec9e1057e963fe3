#!/usr/bin/env bash
# Run the unit tests under every supported CPython (3.10-3.13) found besides the .venv's own.
#
#   scripts/test-pythons.sh
#
# Interpreters: `pyenv root`/versions/3.1[0-3].*/bin/python3 and python3.1[0-3] on PATH, one per
# minor version, skipping the .venv's minor version (`make test-unit` covers that one). PYTHONS
# names interpreters explicitly instead (space separated paths or commands). Each gets a venv
# in build/py-venvs/<version> with the dev extras, its dependencies copied from the cache
# (scripts/lib-venv.sh; installed there once per interpreter version and pyproject.toml) and
# this tree's ringleader installed editable, then runs `pytest -m 'not container'` with that
# venv's python. Exit status: non-zero when an install or a test run fails; 0 when every run
# passes, also when no other interpreter is found (then it says only the default one was tested).
#
# Environment:
#   PYTHONS="/path/python3.10 python3.13"   interpreters to test instead of the discovered ones
#   PIP_TIMEOUT=900                          bound, in seconds, on each venv's pip install
#   PYTEST_TIMEOUT=1800                      bound, in seconds, on each pytest run
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

VENVS_DIR=build/py-venvs
DEFAULT_VENV_PYTHON=.venv/bin/python
PIP_TIMEOUT=${PIP_TIMEOUT:-900}
PYTEST_TIMEOUT=${PYTEST_TIMEOUT:-1800}
SUPPORTED_MINORS=(10 11 12 13)

log() { printf '[test-pythons %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}
# shellcheck source=scripts/lib-venv.sh
source scripts/lib-venv.sh

# "3.12.1" for an interpreter, or nothing when it does not run.
python_version() {
    "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null || true
}

python_executable() {
    "$1" -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null || true
}

is_supported_version() {
    local minor
    [[ $1 == 3.* ]] || return 1
    minor=${1#3.}
    minor=${minor%%.*}
    [[ " ${SUPPORTED_MINORS[*]} " == *" $minor "* ]]
}

minor_of() { echo "${1%.*}"; }

candidate_pythons() {
    if [[ -n ${PYTHONS:-} ]]; then
        # Explicitly named: word splitting on spaces is the documented format.
        # shellcheck disable=SC2086
        printf '%s\n' $PYTHONS
        return 0
    fi
    local pyenv_root minor candidate
    if command -v pyenv >/dev/null 2>&1 && pyenv_root=$(pyenv root 2>/dev/null); then
        for candidate in "$pyenv_root"/versions/3.1[0-3].*/bin/python3; do
            [[ -x $candidate ]] && echo "$candidate"
        done
    fi
    for minor in "${SUPPORTED_MINORS[@]}"; do
        command -v "python3.$minor" 2>/dev/null || true
    done
}

# Fills SELECTED (interpreter paths) and SELECTED_VERSIONS: supported, runnable, one per minor
# version (one per version when named in PYTHONS), none of the .venv's own minor version.
select_pythons() {
    local default_version="" candidate version executable seen_keys=" " key
    SELECTED=()
    SELECTED_VERSIONS=()
    if [[ -x $DEFAULT_VENV_PYTHON ]]; then
        default_version=$(python_version "$DEFAULT_VENV_PYTHON")
    fi
    DEFAULT_VERSION=$default_version
    while IFS= read -r candidate; do
        [[ -n $candidate ]] || continue
        version=$(python_version "$candidate")
        if [[ -z $version ]]; then
            [[ -n ${PYTHONS:-} ]] && die "PYTHONS names '$candidate', which does not run"
            continue
        fi
        if ! is_supported_version "$version"; then
            [[ -n ${PYTHONS:-} ]] &&
                die "PYTHONS names '$candidate', Python $version; supported: 3.10 to 3.13"
            continue
        fi
        executable=$(python_executable "$candidate")
        if [[ -n ${PYTHONS:-} ]]; then
            key=$version
        else
            key=$(minor_of "$version")
            [[ -n $default_version && $key == "$(minor_of "$default_version")" ]] && continue
        fi
        [[ $seen_keys == *" $key "* ]] && continue
        seen_keys+="$key "
        SELECTED+=("$executable")
        SELECTED_VERSIONS+=("$version")
    done < <(candidate_pythons)
}

# build/py-venvs/<version>: a venv of that Python with the dev extras and this tree's ringleader
# (scripts/lib-venv.sh: the dependencies from the cache, installed once per version and
# pyproject.toml). Returns non-zero (after saying why) on failure.
ensure_venv() {
    local python=$1 version=$2 start=$SECONDS
    venv_from_cache "$python" "$VENVS_DIR/$version" "$VENVS_DIR/pip-$version.log" "$PIP_TIMEOUT" ||
        return 1
    log "Python $version: venv ready in $((SECONDS - start))s ($VENVS_DIR/$version)"
}

# "PASSED|FAILED|SKIPPED" from pytest's last summary line (FAILED counts errors too).
pytest_counts() {
    local summary passed=0 failed=0 errors=0 skipped=0
    summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error|skipped|deselected)' "$1" | tail -n 1 ||
        true)
    [[ $summary =~ ([0-9]+)\ passed ]] && passed=${BASH_REMATCH[1]}
    [[ $summary =~ ([0-9]+)\ failed ]] && failed=${BASH_REMATCH[1]}
    [[ $summary =~ ([0-9]+)\ error ]] && errors=${BASH_REMATCH[1]}
    [[ $summary =~ ([0-9]+)\ skipped ]] && skipped=${BASH_REMATCH[1]}
    echo "$passed|$((failed + errors))|$skipped"
}

main() {
    mkdir -p "$VENVS_DIR"
    select_pythons
    if [[ ${#SELECTED[@]} -eq 0 ]]; then
        log "No other CPython 3.10-3.13 found (pyenv versions, python3.1x on PATH, PYTHONS)."
        log "Only the default interpreter (.venv, Python ${DEFAULT_VERSION:-unknown}) was tested," \
            "by 'make test-unit'; this script ran no tests."
        exit 0
    fi
    log "Interpreters: ${SELECTED_VERSIONS[*]} (default .venv: ${DEFAULT_VERSION:-none}, not rerun)"

    local rows=() status=0 i python version venv start seconds outcome counts test_log rc
    for i in "${!SELECTED[@]}"; do
        python=${SELECTED[$i]}
        version=${SELECTED_VERSIONS[$i]}
        venv=$VENVS_DIR/$version
        start=$SECONDS
        if ! ensure_venv "$python" "$version"; then
            rows+=("$python|$version|-|-|-|$((SECONDS - start))|install failed")
            status=1
            continue
        fi
        test_log=$VENVS_DIR/pytest-$version.log
        log "Python $version: pytest -m 'not container' (output in $test_log)"
        start=$SECONDS
        rc=0
        # pipefail: rc is pytest's (or timeout's) status, not tee's. Tee so a long run shows progress; the venv's own python runs pytest (the editable
        # install of src/ is shared, the interpreter and the dependencies are not).
        # The property tests at a tenth of their examples: the .venv's run checks them in full.
        RINGLEADER_PROPERTY_SCALE=${RINGLEADER_PROPERTY_SCALE:-0.1} \
            timeout "$PYTEST_TIMEOUT" "$venv/bin/python" -m pytest -m 'not container' -q \
            -p no:cacheprovider 2>&1 | tee "$test_log" || rc=$?
        seconds=$((SECONDS - start))
        counts=$(pytest_counts "$test_log")
        if [[ $rc -eq 0 ]]; then
            outcome=ok
        elif [[ $rc -eq 124 ]]; then
            outcome="timed out after ${PYTEST_TIMEOUT}s"
            status=1
        else
            outcome="failed (exit $rc)"
            status=1
        fi
        rows+=("$python|$version|$counts|$seconds|$outcome")
    done

    local row format='%-45s %-8s %7s %7s %7s %8s  %s\n' passed failed skipped
    # shellcheck disable=SC2059  # the format is ours
    printf "\n$format" interpreter version passed failed skipped seconds result
    for row in "${rows[@]}"; do
        IFS='|' read -r python version passed failed skipped seconds outcome <<<"$row"
        # shellcheck disable=SC2059
        printf "$format" "$python" "$version" "$passed" "$failed" "$skipped" "$seconds" "$outcome"
    done
    exit "$status"
}

main "$@"
