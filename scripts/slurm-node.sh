#!/usr/bin/env bash
# Entry point of ringleader:slurm (Dockerfile.slurm): one container of the Slurm test cluster
# (scripts/slurm-cluster.sh) as the role given:
#
#   slurm-node.sh head   munged, then slurmctld in the foreground
#   slurm-node.sh node   munged, sshd (mpirun between nodes), then slurmd in the foreground
#
# Reads the cluster's files from the shared directory the cluster script writes, /shared/.slurm:
# munge.key, slurm.conf and ssh/id_ed25519{,.pub} (root's key pair on every node). munged and sshd
# run as daemons (the container's init, docker run --init, reaps what they leave); the Slurm
# daemon replaces this script, so the container lives as long as it does. Every wait is bounded.
#
# Environment: SLURM_CONF_DIR=/shared/.slurm, SLURM_NODE_WAIT=30 (seconds to wait for the
# cluster's files and for munged's socket).
set -euo pipefail

CONF_DIR=${SLURM_CONF_DIR:-/shared/.slurm}
WAIT=${SLURM_NODE_WAIT:-30}
MUNGE_SOCKET=/run/munge/munge.socket.2

log() { printf '[slurm-node %s] %s\n' "$(hostname)" "$*"; }
die() {
    printf '[slurm-node %s] error: %s\n' "$(hostname)" "$*" >&2
    exit 1
}

# wait_for WHAT SECONDS TEST-ARGS...: until `test TEST-ARGS` holds, at most SECONDS.
wait_for() {
    local what=$1 seconds=$2 deadline
    shift 2
    deadline=$((SECONDS + seconds))
    until test "$@"; do
        ((SECONDS < deadline)) || die "$what not there after ${seconds}s"
        sleep 0.2
    done
}

start_munge() {
    wait_for "$CONF_DIR/munge.key" "$WAIT" -s "$CONF_DIR/munge.key"
    install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
    install -d -o munge -g munge -m 0755 /run/munge
    install -o munge -g munge -m 0400 "$CONF_DIR/munge.key" /etc/munge/munge.key
    rm -f "$MUNGE_SOCKET"
    runuser -u munge -- /usr/sbin/munged
    wait_for "munged's socket $MUNGE_SOCKET" "$WAIT" -S "$MUNGE_SOCKET"
    munge -n | unmunge >/dev/null || die "munge cannot encode and decode a credential"
    log "munged is up"
}

install_slurm_conf() {
    wait_for "$CONF_DIR/slurm.conf" "$WAIT" -s "$CONF_DIR/slurm.conf"
    install -d -m 0755 /etc/slurm
    install -m 0644 "$CONF_DIR/slurm.conf" /etc/slurm/slurm.conf
}

start_sshd() {
    wait_for "$CONF_DIR/ssh/id_ed25519.pub" "$WAIT" -s "$CONF_DIR/ssh/id_ed25519.pub"
    ssh-keygen -A >/dev/null
    install -d -m 0755 /run/sshd
    install -d -m 0700 /root/.ssh
    install -m 0600 "$CONF_DIR/ssh/id_ed25519" /root/.ssh/id_ed25519
    install -m 0644 "$CONF_DIR/ssh/id_ed25519.pub" /root/.ssh/id_ed25519.pub
    install -m 0600 "$CONF_DIR/ssh/id_ed25519.pub" /root/.ssh/authorized_keys
    cat >/root/.ssh/config <<'CONFIG'
Host *
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
CONFIG
    chmod 0600 /root/.ssh/config
    /usr/sbin/sshd -t || die "sshd's configuration does not load"
    /usr/sbin/sshd
    log "sshd is up"
}

case ${1:-} in
    head)
        start_munge
        install_slurm_conf
        install -d -m 0755 /var/spool/slurmctld
        touch /var/log/slurmctld.log
        log "starting slurmctld"
        exec slurmctld -D
        ;;
    node)
        start_munge
        install_slurm_conf
        start_sshd
        install -d -m 0755 /var/spool/slurmd
        touch /var/log/slurmd.log
        log "starting slurmd"
        exec slurmd -D
        ;;
    *)
        die "usage: slurm-node.sh head|node (got: ${1:-nothing})"
        ;;
esac
