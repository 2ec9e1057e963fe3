#!/bin/sh
# The expert's baseline for the benchmarks: `bare_mpirun.sh PROGRAM ARG...` as the entry point
# of plain containers. Every container runs only sshd; the first host waits until it can ssh to
# the others, then runs mpirun of PROGRAM (in /opt/ml/code, under `python -m mpi4py`, so a
# rank's non-zero exit aborts the job instead of hanging in MPI_Finalize) with $RANKS_PER_HOST
# ranks per host (default 2) and $MPIRUN_OPTIONS, then stops the others' sshd so their
# containers exit. On one host it is just `mpirun -np N` in that container.
# The job's own ssh files and the user's interpreter, as `ringleader image setup` recorded them.
# ringleader makes each job's keys when it starts and the image has none, so the expert brings
# one key that every host shares ($BARE_SSH_KEY, from bench/startup.py's bare_env): the host key
# of every sshd, the client's identity, authorized, and trusted as any host's key.
ssh=/etc/ringleader/ssh
[ -n "$BARE_SSH_KEY" ] || { echo "bare_mpirun.sh: BARE_SSH_KEY is not set" >&2; exit 78; }
(
  umask 077
  printf '%s\n' "$BARE_SSH_KEY" >"$ssh/ssh_host_ed25519_key"
  cp "$ssh/ssh_host_ed25519_key" "$ssh/id_ed25519"
  public=$(ssh-keygen -y -f "$ssh/id_ed25519") || exit 78
  echo "$public" >"$ssh/authorized_keys"
  echo "* $public" >"$ssh/known_hosts"
) || exit 78
python=$(sed -n 's/^ *"python": "\(.*\)",\{0,1\}$/\1/p' /etc/ringleader/image.json)
hosts=$(python3 -c 'import json; print(" ".join(json.load(open("/opt/ml/input/config/resourceconfig.json"))["hosts"]))')
first=${hosts%% *}
if [ "$(hostname)" != "$first" ]; then exec /usr/sbin/sshd -D -f "$ssh/sshd_config"; fi
program=$1
shift
/usr/sbin/sshd -f "$ssh/sshd_config"
per_host=${RANKS_PER_HOST:-2}
deadline=$(($(date +%s) + ${SSH_WAIT_SECONDS:-600}))
list=""
count=0
for host in $hosts; do
  list="$list${list:+,}$host:$per_host"
  count=$((count + per_host))
  [ "$host" = "$first" ] && continue
  # bounded by time, not tries: 32 hosts x 8 ranks on 2 cores start their sshd slowly
  until ssh -F "$ssh/ssh_config" -o ConnectTimeout=2 "$host" true 2>/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] || exit 69
    sleep 0.1
  done
done
# shellcheck disable=SC2086 # MPIRUN_OPTIONS holds several options
mpirun --allow-run-as-root -np "$count" -H "$list" -bind-to none -map-by slot \
  --mca plm_rsh_args "-F $ssh/ssh_config" $MPIRUN_OPTIONS \
  "$python" -m mpi4py "/opt/ml/code/$program" "$@"
code=$?
# when mpirun returned: the floor under any launcher's teardown (the ranks' own exits)
echo "BENCH mpirun-returned 0 $(date +%s.%6N)"
for host in $hosts; do [ "$host" = "$first" ] || ssh -F "$ssh/ssh_config" "$host" pkill -x sshd; done
exit "$code"
