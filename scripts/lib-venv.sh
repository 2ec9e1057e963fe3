# Shared by setup.sh (.venv) and test-pythons.sh (a venv per other Python): virtualenvs whose
# dependencies are installed once, in the cache outside the tree, and copied into each tree.
# Sourced, not run; the caller defines log.
#
# The cache (RINGLEADER_CACHE, by default ~/.cache/ringleader) keeps one venv per Python version,
# pyproject.toml and extras (`dev` for the tests, `tools` for the demo), without ringleader. A
# tree gets a copy made of hard links (39,000 files in about a second, against 90-100 s for the
# install on these machines), its scripts' interpreter lines pointed at the copy, and this tree's
# ringleader installed into it, editable and without dependencies: no tree ever imports
# another's source.

VENV_CACHE=${RINGLEADER_CACHE:-$HOME/.cache/ringleader}/venvs

# venv_key PYTHON [EXTRAS]: what a venv's dependencies depend on.
venv_key() {
    {
        cat pyproject.toml
        "$1" -V 2>&1
        printf '%s\n' "${2:-dev}"
    } | sha256sum | cut -d' ' -f1
}

# venv_from_cache PYTHON DEST PIP_LOG [PIP_TIMEOUT] [EXTRAS]: DEST becomes a venv of PYTHON with
# ringleader's EXTRAS (default dev) and this tree's ringleader (editable). pip's output goes to
# PIP_LOG; each pip run is bounded by PIP_TIMEOUT seconds (default 900). Returns non-zero, after
# saying why, on failure.
venv_from_cache() {
    local python=$1 dest=$2 pip_log=$3 bound=${4:-900} extras=${5:-dev} key version kept prefix abs
    key=$(venv_key "$python" "$extras")
    version=$("$python" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])') || {
        log "$python does not run"
        return 1
    }
    kept=$VENV_CACHE/$version-${key:0:12}
    mkdir -p "$VENV_CACHE" "$(dirname "$pip_log")"
    if [[ -f $kept/.ready ]] && "$kept/bin/python" -c '' 2>/dev/null; then
        log "Python $version: the dependencies are in the cache ($kept)"
    else
        log "Python $version: installing ringleader's [$extras] dependencies into $kept (once per pyproject.toml; bounded by ${bound}s; log $pip_log)"
        rm -rf "$kept"
        # In place, not renamed afterwards: a venv's scripts name their interpreter by path.
        if ! "$python" -m venv "$kept" ||
            ! timeout "$bound" "$kept/bin/python" -m pip install --progress-bar off -e ".[$extras]" \
                >"$pip_log" 2>&1 ||
            ! "$kept/bin/python" -m pip uninstall --yes ringleader >>"$pip_log" 2>&1; then
            tail -n 30 "$pip_log" >&2
            log "Python $version: pip install -e '.[$extras]' failed or timed out (see $pip_log)"
            rm -rf "$kept"
            return 1
        fi
        touch "$kept/.ready"
    fi
    rm -rf "$dest"
    mkdir -p "$(dirname "$dest")"
    abs=$(cd "$(dirname "$dest")" && pwd)/$(basename "$dest")
    cp -al "$kept" "$dest" 2>/dev/null || cp -a "$kept" "$dest"
    rm -f "$dest/.ready"
    # sed -i writes a new file: the cache's copy, a hard link until then, is left as it was.
    prefix="#!$kept/bin/"
    grep -lsF -- "$prefix" "$dest"/bin/* | xargs -r sed -i "1s|^$prefix|#!$abs/bin/|"
    sed -i "s|$kept|$abs|g" "$dest"/bin/activate*
    if ! timeout "$bound" "$dest/bin/python" -m pip install --quiet --no-deps -e . \
        >>"$pip_log" 2>&1; then
        tail -n 30 "$pip_log" >&2
        log "Python $version: pip install --no-deps -e . failed or timed out (see $pip_log)"
        return 1
    fi
}
