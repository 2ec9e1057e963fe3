#!/bin/sh
# Baseline for bench/startup.py: what an expert types on plain containers. Every container runs
# only sshd; the first host waits until it can ssh to the others, then runs mpirun of the same
# probe (under `python -m mpi4py`, so a rank's non-zero exit aborts the job instead of hanging
# in MPI_Finalize), then stops the others' sshd so their containers exit. Arguments go to the probe.
hosts=$(python3 -c 'import json; print(" ".join(json.load(open("/opt/ml/input/config/resourceconfig.json"))["hosts"]))')
first=${hosts%% *}
if [ "$(hostname)" != "$first" ]; then exec /usr/sbin/sshd -D; fi
/usr/sbin/sshd
list=""
count=0
for host in $hosts; do
  list="$list${list:+,}$host:2"
  count=$((count + 2))
  [ "$host" = "$first" ] && continue
  tries=0
  until ssh -o ConnectTimeout=2 "$host" true 2>/dev/null; do
    tries=$((tries + 1)); [ "$tries" -lt 300 ] || exit 69
    sleep 0.1
  done
done
mpirun --allow-run-as-root -np "$count" -H "$list" -bind-to none -map-by slot \
  /opt/ringleader/venv/bin/python -m mpi4py /opt/ml/code/probe.py "$@"
code=$?
for host in $hosts; do [ "$host" = "$first" ] || ssh "$host" pkill -x sshd; done
exit "$code"
