#!/bin/sh
# Baseline for bench/logs.py: plain `mpirun --tag-output` on the same fake hosts, as the
# container's main process, so its output takes the same path (docker logs) as ringleader's.
# Hosts are algo-1..algo-3; extra arguments go to print_lines.py.
me=$(hostname)
if [ "$me" != "algo-1" ]; then exec /usr/sbin/sshd -D; fi
/usr/sbin/sshd
for host in algo-2 algo-3; do
  tries=0
  until ssh -o ConnectTimeout=2 "$host" true 2>/dev/null; do
    tries=$((tries + 1)); [ "$tries" -lt 100 ] || exit 69
    sleep 0.1
  done
done
mpirun --allow-run-as-root --tag-output -np 6 -H algo-1:2,algo-2:2,algo-3:2 -bind-to none \
  --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
  /opt/ringleader/venv/bin/python /opt/ml/code/print_lines.py "$@"
code=$?
for host in algo-2 algo-3; do ssh "$host" pkill -x sshd; done
exit "$code"
