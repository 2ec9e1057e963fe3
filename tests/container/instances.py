"""Cluster "instances" for tests and benchmarks: containers of an image on a private Docker
network, started with only their sshd (no SageMaker environment), reaching each other by name."""

import io
import subprocess
import tarfile
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import docker

from ringleader.launch import jobkeys

# A cluster machine's ssh, as an administrator sets it up: sshd running with the machine's own
# host key, and root's ssh client holding the key pair every machine shares (any may lead),
# authorized on every machine, each machine's host key pinned under its name. The image's
# job-scoped files (`ringleader image setup`, /etc/ringleader/ssh) give sshd's and the client's
# settings and say where those keys go; the image holds no key (issue 26), so the test makes
# them when it starts: the shared pair on this host, each host key in its own container.
SSH_DIR = "/etc/ringleader/ssh"
HOST_KEY = f"{SSH_DIR}/{jobkeys.HOST_KEY_NAME}"
MACHINE_SSH = [
    "/bin/sh",
    "-c",
    # rm first: ssh-keygen would ask before replacing a key (an image an older setup prepared);
    # the public line on stdout is how the test learns the key to pin
    f"rm -f {HOST_KEY} {HOST_KEY}.pub && ssh-keygen -q -t ed25519 -N '' -f {HOST_KEY} && "
    f"cat {HOST_KEY}.pub && "
    f"install -d -m 700 /root/.ssh && cp {SSH_DIR}/ssh_config /root/.ssh/config && "
    f"exec /usr/sbin/sshd -D -e -f {SSH_DIR}/sshd_config",
]


def archive(files: Mapping[str, tuple[bytes, int]]) -> bytes:
    """A tar of `files` (name: content and mode), owned by root, for put_archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def client_files(directory: Path) -> bytes:
    """The key pair every machine shares and its authorized_keys, made in `directory`, as the
    archive to put into each machine's SSH_DIR."""
    private = directory / jobkeys.CLIENT_KEY_NAME
    jobkeys.keygen(private, "ringleader cluster test")
    public = private.with_name(f"{private.name}.pub")
    jobkeys.authorize(directory, public.read_text(encoding="ascii"))
    authorized = directory / jobkeys.AUTHORIZED_KEYS_NAME
    # ssh refuses a private key others can read, sshd authorized_keys others can write
    return archive(
        {
            private.name: (private.read_bytes(), 0o600),
            public.name: (public.read_bytes(), 0o644),
            authorized.name: (authorized.read_bytes(), 0o600),
        }
    )


class Instances:
    """N containers named node1..nodeN that reach each other by name over ssh."""

    def __init__(
        self, client: docker.DockerClient, image: str, count: int, without_sshd: Sequence[str] = ()
    ) -> None:
        self.client, self.tag = client, uuid.uuid4().hex[:8]
        labels = {"ringleader.job": f"cluster-test-{self.tag}"}
        self.network = client.networks.create(f"rlc-{self.tag}", labels=labels)
        self.nodes: dict[str, Any] = {}
        try:
            self._start(image, count, without_sshd, labels)
        except BaseException:
            self.remove()  # nothing of a half-made cluster is left running
            raise

    def _start(
        self, image: str, count: int, without_sshd: Sequence[str], labels: dict[str, str]
    ) -> None:
        client = self.client
        with tempfile.TemporaryDirectory(prefix="rlc-keys-") as keys:
            shared = client_files(Path(keys))
            for index in range(1, count + 1):
                name = f"node{index}"
                self.nodes[name] = container = client.containers.create(
                    image,
                    name=f"rlc-{self.tag}-{name}",
                    hostname=name,
                    entrypoint=["sleep", "infinity"] if name in without_sshd else MACHINE_SSH,
                    detach=True,
                    labels=labels,
                    network=self.network.name,
                )
                self.network.disconnect(container)
                self.network.connect(container, aliases=[name])
                # before the start: sshd finds the client's key authorized from its first session
                container.put_archive(SSH_DIR, shared)
                container.start()
            host_keys = {
                name: self._host_key(name) for name in self.nodes if name not in without_sshd
            }
            jobkeys.pin_hosts(Path(keys), host_keys)
            known_hosts = (Path(keys) / jobkeys.KNOWN_HOSTS_NAME).read_bytes()
        for name in self.nodes:
            self.put(name, f"{SSH_DIR}/{jobkeys.KNOWN_HOSTS_NAME}", known_hosts, 0o600)
            self.put(name, "/work/hosts", self.hostfile(list(self.nodes)).encode())

    def _host_key(self, name: str) -> str:
        """The public line of the host key the node made as it started: its first line out
        (read as it comes: sshd starts right after it)."""
        container, output = self.nodes[name], bytearray()
        for chunk in container.logs(stdout=True, stderr=False, stream=True, follow=True):
            output += chunk
            if b"\n" in output:
                return bytes(output).partition(b"\n")[0].decode("ascii")
        logs = container.logs().decode(errors="replace").strip()
        raise RuntimeError(f"{name} stopped before it made its ssh host key: {logs}")

    def put_everywhere(self, path: str, data: bytes) -> None:
        for name in self.nodes:
            self.put(name, path, data)

    def hostfile(self, names: Sequence[str], slots: int = 2) -> str:
        return "# test cluster\n" + "".join(f"{name} slots={slots}\n" for name in names)

    def put(self, name: str, path: str, data: bytes, mode: int = 0o644) -> None:
        directory, _, file_name = path.rpartition("/")
        self.nodes[name].exec_run(["mkdir", "-p", directory])
        self.nodes[name].put_archive(directory, archive({file_name: (data, mode)}))

    def sh(self, name: str, script: str) -> tuple[int, str]:
        code, output = self.nodes[name].exec_run(["sh", "-c", script], workdir="/work")
        return code, output.decode(errors="replace")

    def start(self, args: Sequence[str], name: str = "node1") -> "subprocess.Popen[str]":
        """`ringleader ...` inside a node, output streamed to us."""
        return subprocess.Popen(
            ["docker", "exec", "-w", "/work", self.nodes[name].name, "ringleader", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def ringleader(self, args: Sequence[str], timeout: float = 240) -> tuple[int, str]:
        process = self.start(args)
        output, _ = process.communicate(timeout=timeout)
        return process.returncode, output

    def job_processes(self) -> dict[str, list[str]]:
        """Per running node, every process but sshd, the shell asking and ps itself (a node a
        test killed has none, and cannot be asked)."""
        found = {}
        for name, container in self.nodes.items():
            container.reload()
            if container.status != "running":
                continue
            _, output = self.sh(name, "ps -eo pid=,args=")
            found[name] = [
                line.strip()
                for line in output.splitlines()
                if line.strip() and not any(word in line for word in ("sshd", "ps -eo", "sh -c ps"))
            ]
        return found

    def wait_until_clean(self, timeout: float) -> dict[str, list[str]]:
        deadline = time.monotonic() + timeout
        while True:
            left = {name: procs for name, procs in self.job_processes().items() if procs}
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.2)

    def remove(self) -> None:
        for container in self.nodes.values():
            container.remove(force=True)
        self.network.remove()
