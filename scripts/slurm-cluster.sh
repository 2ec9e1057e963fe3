#!/usr/bin/env bash
# A real Slurm cluster of containers on this machine, for ringleader's tests and for trying
# ringleader under Slurm: Debian bookworm's Slurm 22.05 and MUNGE in ringleader:slurm
# (Dockerfile.slurm, `make image-slurm`), one container per node on the Docker network
# ringleader-slurm.
#
#   scripts/slurm-cluster.sh up       (re)start the cluster and wait until every node is idle
#   scripts/slurm-cluster.sh down     remove its containers and network (quiet when there are none)
#   scripts/slurm-cluster.sh status   its containers and, when the head runs, sinfo
#
# `up` removes what an earlier cluster left, then writes the cluster's files into the shared
# directory's .slurm/ (a fresh munge key, an ed25519 key pair for root on the nodes, slurm.conf)
# and starts ringleader-slurm-head (slurmctld) and ringleader-slurm-node1..N (slurmd, and sshd for
# mpirun between nodes), each with --hostname = its name (slurmd takes its node name from it),
# --init (reaps what the daemons leave) and the shared directory at /shared. Submit from there:
#
#   docker exec -w /shared ringleader-slurm-head sbatch -N3 --wrap 'srun hostname'
#   docker exec ringleader-slurm-head sinfo
#   docker exec ringleader-slurm-head scontrol show job -o 1     (no slurmdbd: no sacct)
#
# Environment:
#   NODES=3                            compute nodes (ringleader-slurm-node1..NODES)
#   SLURM_SHARED=build/slurm-shared    host directory mounted at /shared in every container
#   SLURM_UP_TIMEOUT=90                seconds `up` waits for every node to be idle
#   SLURM_IMAGE=ringleader:slurm       the node image
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib-images.sh
source "$ROOT/scripts/lib-images.sh"

NODES=${NODES:-3}
IMAGE=${SLURM_IMAGE:-ringleader:slurm}
SHARED=${SLURM_SHARED:-$ROOT/build/slurm-shared}
UP_TIMEOUT=${SLURM_UP_TIMEOUT:-90}
NETWORK=ringleader-slurm
HEAD=ringleader-slurm-head
NODE_PREFIX=ringleader-slurm-node
LABEL=ringleader.slurm-cluster=ringleader


node_names() {
    local i
    for ((i = 1; i <= NODES; i++)); do printf '%s%d\n' "$NODE_PREFIX" "$i"; done
}

cluster_containers() { docker ps -aq --filter "label=$LABEL"; }

cluster_down() {
    local -a ids
    mapfile -t ids < <(cluster_containers)
    if ((${#ids[@]})); then
        docker rm -f "${ids[@]}" >/dev/null
        log "Removed ${#ids[@]} container(s) of the Slurm cluster"
    fi
    if docker network inspect "$NETWORK" >/dev/null 2>&1; then
        docker network rm "$NETWORK" >/dev/null || die "cannot remove network $NETWORK (containers not of the cluster still on it?)"
        log "Removed network $NETWORK"
    fi
}

write_slurm_conf() {
    local hardware=$1
    cat <<CONF
# Written by scripts/slurm-cluster.sh up: the ringleader Slurm test cluster (Slurm 22.05).
ClusterName=ringleader
SlurmctldHost=$HEAD
SlurmUser=root
SlurmdUser=root
MailProg=/bin/true
AuthType=auth/munge
CredType=cred/munge
# No cgroups inside the containers: processes are tracked by their parents in /proc, and tasks
# are not bound to CPUs.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
# Whole nodes per job.
SelectType=select/linear
SchedulerType=sched/backfill
# A node that registers again (its container restarted) is back in service.
ReturnToService=2
# A batch job that loses a node ends (NODE_FAIL) instead of going back to the queue, where a job
# that needs every node would wait forever; \`sbatch --requeue\` asks for the requeue.
JobRequeue=0
# A node that stops answering is DOWN (and its job ends) about 30 s after it died.
SlurmdTimeout=30
# Slurm's default: SIGTERM (scancel, the time limit), then SIGKILL this many seconds later.
KillWait=30
MinJobAge=300
InactiveLimit=0
# No slurmdbd: sacct has nothing; \`scontrol show job\` keeps a job MinJobAge seconds after it ends.
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurmctld.log
SlurmdLogFile=/var/log/slurmd.log
# The nodes take the configured CPUs and memory even when slurmd detects others (no drain).
SlurmdParameters=config_overrides
NodeName=${NODE_PREFIX}[1-$NODES] $hardware RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
}

make_cluster_files() {
    local conf=$SHARED/.slurm hardware
    rm -rf "$conf"
    mkdir -p "$conf/ssh" "$SHARED/jobs"
    chmod 0700 "$conf" "$conf/ssh"
    dd if=/dev/urandom of="$conf/munge.key" bs=1024 count=1 status=none
    chmod 0400 "$conf/munge.key"
    if have ssh-keygen; then
        ssh-keygen -q -t ed25519 -N '' -C "root@$NETWORK" -f "$conf/ssh/id_ed25519"
    else
        docker run --rm --entrypoint ssh-keygen -v "$conf/ssh:/keys" "$IMAGE" \
            -q -t ed25519 -N '' -C "root@$NETWORK" -f /keys/id_ed25519
    fi
    # What slurmd detects in a container of the image (slurmd -C: CPUs=2 Boards=1
    # SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=...), memory left out; else
    # the CPUs Docker reports.
    hardware=$(docker run --rm --entrypoint slurmd "$IMAGE" -C 2>/dev/null |
        grep -oE '(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+' | tr '\n' ' ' || true)
    hardware=${hardware% }
    if [[ $hardware != *CPUs=* ]]; then
        hardware="CPUs=$(docker info --format '{{.NCPU}}')"
    fi
    write_slurm_conf "$hardware" >"$conf/slurm.conf"
    log "Cluster files in $conf: munge.key, ssh/id_ed25519, slurm.conf ($NODES nodes: $hardware)"
}

start_container() {
    local name=$1 role=$2
    docker run -d --name "$name" --hostname "$name" --network "$NETWORK" \
        --label "$LABEL" --init --shm-size 1g -v "$SHARED:/shared" \
        "$IMAGE" "$role" >/dev/null
}

# node_states: "name state" a line, one per node, as sinfo in the head reports them now.
node_states() {
    timeout 15 docker exec "$HEAD" sinfo -h -N -o '%N %t' 2>/dev/null || true
}

show_failure() {
    local name
    printf '\nLast sinfo:\n%s\n' "$(timeout 15 docker exec "$HEAD" sinfo -N 2>&1 || true)" >&2
    for name in "$HEAD" $(node_names); do
        printf '\n--- %s (%s): docker logs, last 20 lines\n' "$name" \
            "$(docker inspect --format '{{.State.Status}}' "$name" 2>/dev/null || echo missing)" >&2
        docker logs --tail 20 "$name" 2>&1 | sed 's/^/    /' >&2 || true
        printf -- '--- %s: /var/log/slurm*.log, last 20 lines\n' "$name" >&2
        timeout 15 docker exec "$name" sh -c 'tail -n 20 /var/log/slurm*.log' 2>&1 | sed 's/^/    /' >&2 || true
    done
}

wait_until_idle() {
    local start=$SECONDS deadline=$((SECONDS + UP_TIMEOUT)) states idle summary last_summary=
    local last_print=-100 name status
    while :; do
        for name in "$HEAD" $(node_names); do
            status=$(docker inspect --format '{{.State.Status}}' "$name" 2>/dev/null || echo missing)
            if [[ $status != running ]]; then
                show_failure
                die "container $name is $status, not running"
            fi
        done
        states=$(node_states)
        idle=$(awk '$2 == "idle"' <<<"$states" | wc -l)
        summary=$(awk '{printf "%s%s=%s", (NR > 1 ? " " : ""), $1, $2}' <<<"$states")
        summary=${summary//$NODE_PREFIX/node}
        if ((idle == NODES)); then
            log "  $(printf '%4ss' $((SECONDS - start))) all $NODES nodes idle: $summary"
            return 0
        fi
        if [[ $summary != "$last_summary" ]] || ((SECONDS - last_print >= 10)); then
            log "  $(printf '%4ss' $((SECONDS - start))) $idle/$NODES nodes idle: ${summary:-slurmctld not answering yet}"
            last_summary=$summary
            last_print=$SECONDS
        fi
        if ((SECONDS >= deadline)); then
            show_failure
            die "not every node idle after ${UP_TIMEOUT}s (SLURM_UP_TIMEOUT)"
        fi
        sleep 1
    done
}

cluster_up() {
    [[ $NODES =~ ^[1-9][0-9]*$ ]] || die "NODES must be a whole number >= 1, not '$NODES'"
    [[ $UP_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "SLURM_UP_TIMEOUT must be whole seconds >= 1, not '$UP_TIMEOUT'"
    docker info >/dev/null 2>&1 || die "Docker Engine does not answer; run 'scripts/setup.sh docker'"
    image_exists "$IMAGE" || die "image $IMAGE is not built; run 'make image-slurm'"
    local start=$SECONDS name
    cluster_down
    mkdir -p "$SHARED"
    SHARED=$(cd "$SHARED" && pwd)
    make_cluster_files
    docker network create --label "$LABEL" "$NETWORK" >/dev/null
    log "Starting $HEAD (slurmctld) and ${NODE_PREFIX}1..$NODES (slurmd) from $IMAGE on network $NETWORK; /shared = $SHARED"
    start_container "$HEAD" head
    for name in $(node_names); do start_container "$name" node; done
    log "Waiting (at most ${UP_TIMEOUT}s) until sinfo in $HEAD shows every node idle"
    wait_until_idle
    log "Slurm cluster up in $((SECONDS - start))s. Try: docker exec -w /shared $HEAD sbatch -N$NODES --wrap 'srun hostname'"
}

cluster_status() {
    local -a ids
    mapfile -t ids < <(cluster_containers)
    if ((${#ids[@]} == 0)); then
        log "No Slurm cluster (no container labelled $LABEL)"
        return 1
    fi
    docker ps -a --filter "label=$LABEL" --format 'table {{.Names}}\t{{.Status}}'
    if [[ $(docker inspect --format '{{.State.Status}}' "$HEAD" 2>/dev/null) != running ]]; then
        log "$HEAD is not running"
        return 1
    fi
    timeout 15 docker exec "$HEAD" sinfo -N
}

case ${1:-} in
    up) cluster_up ;;
    down) cluster_down ;;
    status) cluster_status ;;
    -h | --help | help) usage ;;
    *)
        usage >&2
        die "expected up, down or status${1:+, not '$1'}"
        ;;
esac
