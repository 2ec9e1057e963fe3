#!/usr/bin/env bash
# Smoke test of the image's MPI plumbing, without ringleader's entry point: two containers on a
# private network run sshd, and mpirun on the first starts 2 ranks per host over real ssh.
#   scripts/smoke-image.sh [IMAGE]      (default: $IMAGE or ringleader:latest)
set -euo pipefail
image=${1:-${IMAGE:-ringleader:latest}}
tag=rl-smoke-$$
ssh=/etc/ringleader/ssh # the job's own ssh files, written by `ringleader image setup`
net=$tag
keys=$(mktemp -d)
cleanup() {
    docker rm -f "$tag-algo-1" "$tag-algo-2" >/dev/null 2>&1 || true
    docker network rm "$net" >/dev/null 2>&1 || true
    rm -rf "$keys"
}
trap cleanup EXIT
command -v ssh-keygen >/dev/null || { echo "smoke: needs ssh-keygen (openssh-client)" >&2; exit 1; }

echo "==> Image $image: $(docker run --rm --entrypoint /bin/sh "$image" -c \
    'python --version; mpirun --version | head -n 1' | paste -sd ' ')"
# The image holds no ssh key (every ringleader job makes its own), so this test makes them as a
# job would: one client pair authorized on both hosts, a host key per host pinned by its name.
umask 077 # private keys and the files ssh checks stay the owner's only
ssh-keygen -q -t ed25519 -N '' -C smoke -f "$keys/id_ed25519"
for h in algo-1 algo-2; do
    mkdir "$keys/$h"
    ssh-keygen -q -t ed25519 -N '' -C "$h" -f "$keys/$h/ssh_host_ed25519_key"
    cp "$keys/id_ed25519" "$keys/id_ed25519.pub" "$keys/$h/"
    cp "$keys/id_ed25519.pub" "$keys/$h/authorized_keys"
    read -r kind body _ <"$keys/$h/ssh_host_ed25519_key.pub"
    echo "$h $kind $body" >>"$keys/known_hosts"
done
docker network create "$net" >/dev/null
for h in algo-1 algo-2; do
    cp "$keys/known_hosts" "$keys/$h/"
    docker create --name "$tag-$h" --hostname "$h" --network "$net" --network-alias "$h" \
        --entrypoint /bin/sh "$image" -c "exec /usr/sbin/sshd -D -e -f $ssh/sshd_config" >/dev/null
    # before the start: sshd needs its host key; docker cp makes the files root's
    docker cp "$keys/$h/." "$tag-$h:$ssh/"
    docker start "$tag-$h" >/dev/null
done
# sshd needs a moment to listen: bounded wait until algo-2 accepts an ssh session.
deadline=$((SECONDS + 30))
until docker exec "$tag-algo-1" ssh -F "$ssh/ssh_config" algo-2 true 2>/dev/null; do
    ((SECONDS < deadline)) || { echo "smoke: algo-2 not reachable over ssh" >&2; exit 1; }
    sleep 0.2
done
echo "==> mpirun -np 4 -H algo-1:2,algo-2:2 (mpi4py allreduce)"
out=$(docker exec "$tag-algo-1" mpirun --allow-run-as-root -np 4 -H algo-1:2,algo-2:2 \
    -bind-to none -map-by slot --mca plm_rsh_args "-F $ssh/ssh_config" python -c '
from mpi4py import MPI
import socket
c = MPI.COMM_WORLD
total = c.allreduce(c.rank)
print(f"rank {c.rank}/{c.size} on {socket.gethostname()}: allreduce={total}", flush=True)
assert total == 6')
printf '%s\n' "$out"
[[ $(grep -o 'allreduce=6' <<<"$out" | wc -l) -eq 4 ]] || { echo "smoke: FAILED" >&2; exit 1; }
echo "==> smoke test passed"
