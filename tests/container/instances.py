"""Cluster "instances" for tests and benchmarks: containers of an image on a private Docker
network, started with only their sshd (no SageMaker environment), reaching each other by name."""

import io
import subprocess
import tarfile
import time
import uuid
from collections.abc import Sequence
from typing import Any

import docker

# A cluster machine's ssh, as an administrator sets it up: sshd running, and root's ssh client
# holding the key every machine trusts. The image's job-scoped files (`ringleader image setup`,
# /etc/ringleader/ssh) stand in for them; the image's own ssh configuration is not the job's.
SSH_DIR = "/etc/ringleader/ssh"
MACHINE_SSH = [
    "/bin/sh",
    "-c",
    f"install -d -m 700 /root/.ssh && cp {SSH_DIR}/ssh_config /root/.ssh/config && "
    f"exec /usr/sbin/sshd -D -e -f {SSH_DIR}/sshd_config",
]


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
        for index in range(1, count + 1):
            name = f"node{index}"
            self.nodes[name] = client.containers.run(
                image,
                name=f"rlc-{self.tag}-{name}",
                hostname=name,
                entrypoint=["sleep", "infinity"] if name in without_sshd else MACHINE_SSH,
                detach=True,
                labels=labels,
                network=self.network.name,
            )
            self.network.disconnect(self.nodes[name])
            self.network.connect(self.nodes[name], aliases=[name])
        for name in self.nodes:
            self.put(name, "/work/hosts", self.hostfile(self.nodes).encode())

    def put_everywhere(self, path: str, data: bytes) -> None:
        for name in self.nodes:
            self.put(name, path, data)

    def hostfile(self, names: Sequence[str], slots: int = 2) -> str:
        return "# test cluster\n" + "".join(f"{name} slots={slots}\n" for name in names)

    def put(self, name: str, path: str, data: bytes) -> None:
        directory, _, file_name = path.rpartition("/")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            info = tarfile.TarInfo(file_name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        self.nodes[name].exec_run(["mkdir", "-p", directory])
        self.nodes[name].put_archive(directory, buffer.getvalue())

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
        """Per node, every process but sshd, the shell asking and ps itself."""
        found = {}
        for name in self.nodes:
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
