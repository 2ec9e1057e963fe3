# ringleader's image probe: what this image has for ringleader, one `key=value` line each,
# read by ringleader/tools/image/probe.py. Arguments: interpreters to look at (besides the one
# the image settings name and python3 on PATH). POSIX sh only: it must run in any image.

find_tool() {
    found=$(command -v "$1" 2>/dev/null) || found=
    if [ -z "$found" ]; then
        # daemons such as sshd live in sbin, which is not on every PATH
        for dir in /usr/sbin /usr/local/sbin /sbin; do
            if [ -x "$dir/$1" ]; then
                found=$dir/$1
                break
            fi
        done
    fi
    echo "tool:$1=$found"
}

if [ -r /etc/os-release ]; then
    (
        . /etc/os-release
        echo "os_id=${ID:-}"
        echo "os_like=${ID_LIKE:-}"
        echo "os_name=${PRETTY_NAME:-}"
    )
fi
echo "user=$(id -u 2>/dev/null)"
for tool in sshd ssh ssh-keygen mpirun ringleader-entrypoint; do
    find_tool "$tool"
done
if command -v mpirun >/dev/null 2>&1; then
    echo "mpirun_version=$(mpirun --version 2>/dev/null | head -n 1)"
fi

settings=/etc/ringleader/image.json
image_python=
if [ -r "$settings" ]; then
    echo "settings=$settings"
    image_python=$(sed -n 's/^ *"python": "\(.*\)",\{0,1\}$/\1/p' "$settings")
    echo "settings_python=$image_python"
fi

PROBE='import importlib.util as u, sys
print(".".join(map(str, sys.version_info[:3])), end="|")
names = ("ringleader", "mpi4py", "torch", "tensorflow", "mxnet", "horovod")
print(",".join(name for name in names if u.find_spec(name)))'
for python in "$@" "$image_python" "$(command -v python3 2>/dev/null)"; do
    if [ -n "$python" ] && [ -x "$python" ]; then
        echo "python:$python=$("$python" -c "$PROBE" 2>/dev/null)"
    elif [ -n "$python" ]; then
        echo "python:$python="
    fi
done
