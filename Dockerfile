# ringleader training image: Debian's Python 3.11, OpenMPI 4.1 and OpenSSH, plus the ringleader
# package in a venv. Build with scripts/setup.sh (or `make image`): it prepares the wheelhouse
# (build/wheelhouse/{deps,ringleader}) on the host, so this build needs no PyPI, only the Debian
# mirror. No `# syntax=` line on purpose: no registry can be reached for a frontend image, and the
# file works with both the classic builder and BuildKit.
#
# Layers, least to most often changed: apt packages -> dependency venv (own stage, so the wheels are
# not kept in the image) -> ssh config, key, entry script, /opt/ml -> the ringleader wheel.

ARG BASE_IMAGE=debian:bookworm-slim

# ---------------------------------------------------------------------------------------------------
FROM ${BASE_IMAGE} AS system

ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        python3 python3-venv python3-mpi4py \
        openmpi-bin libopenmpi-dev \
        openssh-server openssh-client \
        tini iproute2 procps ca-certificates rsync \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/dpkg.log

# ---------------------------------------------------------------------------------------------------
FROM system AS deps

# Every dependency of ringleader (not ringleader itself), built on the host for CPython 3.11.
COPY build/wheelhouse/deps/ /tmp/wheels/
RUN /usr/bin/python3 -m venv --system-site-packages /opt/ringleader/venv \
 && /opt/ringleader/venv/bin/pip install --no-index --find-links /tmp/wheels \
        --no-cache-dir --disable-pip-version-check /tmp/wheels/*.whl

# ---------------------------------------------------------------------------------------------------
FROM system

COPY --from=deps /opt/ringleader/venv /opt/ringleader/venv

# On every ringleader image (the framework images start from this one): the image scripts remove
# untagged images with this label once a rebuild has superseded them.
LABEL ringleader.image=ringleader

ENV PATH=/opt/ringleader/venv/bin:$PATH \
    LANG=C.UTF-8 \
    PYTHONUNBUFFERED=1 \
    OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Keep in sync with SetEnv in entrypoint/sshd_config (ssh sessions do not see this ENV).
# Intra-job SSH: hardened sshd, non-interactive client, one root key pair per image build (all
# containers of the image trust each other; the key is made here, never stored in the repository).
# OpenMPI system default: no CMA single copy between ranks on one host (Docker's default seccomp/
# capabilities forbid process_vm_readv: "Read -1, expected N, errno = 1"); --mca overrides it.
COPY entrypoint/sshd_config /etc/ssh/sshd_config.d/ringleader.conf
COPY entrypoint/ssh_config /etc/ssh/ssh_config.d/ringleader.conf
COPY entrypoint/entrypoint.sh /usr/local/bin/ringleader-entrypoint
RUN chmod 644 /etc/ssh/sshd_config.d/ringleader.conf /etc/ssh/ssh_config.d/ringleader.conf \
 && chmod 755 /usr/local/bin/ringleader-entrypoint \
 && ssh-keygen -A \
 && mkdir -p /run/sshd /root/.ssh \
 && ssh-keygen -q -t ed25519 -N '' -C ringleader -f /root/.ssh/id_ed25519 \
 && cp /root/.ssh/id_ed25519.pub /root/.ssh/authorized_keys \
 && chmod 700 /root/.ssh \
 && chmod 600 /root/.ssh/id_ed25519 /root/.ssh/authorized_keys \
 && /usr/sbin/sshd -t \
 && printf '%s\n' '# ringleader: containers lack CAP_SYS_PTRACE, so the vader BTL must not try CMA' \
        'btl_vader_single_copy_mechanism = none' >> /etc/openmpi/openmpi-mca-params.conf \
 && mkdir -p /opt/ml/code /opt/ml/model /opt/ml/input/config /opt/ml/input/data \
             /opt/ml/output/data /opt/ml/checkpoints

# The package itself, last: a change to it rebuilds only this layer. Its dependencies come from
# the venv above (no index); if they no longer match, this fails loudly instead of going online.
COPY build/wheelhouse/ringleader/ /tmp/wheels/
RUN pip install --no-index --find-links /tmp/wheels --no-cache-dir --disable-pip-version-check \
        /tmp/wheels/ringleader-*.whl \
 && rm -rf /tmp/wheels \
 && python -c 'import mpi4py, sagemaker_training, ringleader'

ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/ringleader-entrypoint"]
CMD ["train"]
