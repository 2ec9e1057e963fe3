"""Issue 26: who the leader's control port admits, with what proof, and what it costs a peer
that never joins (real TCP on 127.0.0.1)."""

import contextlib
import socket
import threading

import pytest

from ringleader.core.errors import ConfigError
from ringleader.wire import auth, control, server_loop
from ringleader.wire.control import Admission, ControlServer
from ringleader.wire.events import WorkerHello
from ringleader.wire.messages import CONTROL_LINK, PULSE_LINK, Greeting, Join, Welcome
from ringleader.wire.protocol import Channel, ChannelClosed
from tests.unit.test_core_control import (
    JOB,
    SLOW,
    Leader,
    assert_closed_by_the_leader,
    assert_refused,
    free_port,
    greeted,
    join,
    next_event,
)

SECRET = bytes(range(32))
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHvz3A9ouL0AZdbTYLTZlcrh7EfzJ4Jy8yiH8s3q6vCd job"


@pytest.fixture
def leaders():
    """Makes leaders (whom each admits: `admission`), closed after the test."""
    made: list[Leader] = []

    def make(admission: Admission | None = None) -> Leader:
        made.append(Leader(admission=admission))
        return made[-1]

    yield make
    for leader in made:
        leader.close()


@pytest.fixture
def leader(leaders):
    return leaders()


@pytest.fixture
def guarded(leaders):
    return leaders(Admission(JOB, SECRET, KEY))


def test_a_worker_with_the_jobs_secret_joins_and_gets_the_ssh_key(guarded):
    control_link = join(guarded.port, "algo-2", secret=SECRET)
    pulse_link = join(guarded.port, "algo-2", PULSE_LINK, secret=SECRET)
    assert (control_link.ssh_key, pulse_link.ssh_key) == (KEY, None)
    control_link.channel.send(control.hello_message("algo-2", host_key=KEY))
    assert next_event(guarded.events) == WorkerHello("algo-2", host_key=KEY)
    control_link.channel.close()
    pulse_link.channel.close()


@pytest.mark.parametrize("secret", [None, bytes(32)], ids=["no secret", "another secret"])
def test_a_worker_without_the_jobs_secret_is_refused(guarded, secret):
    with pytest.raises(ConfigError, match="refused this host: its proof for 'algo-2' does not"):
        join(guarded.port, "algo-2", secret=secret)
    assert "does not match this job's secret" in guarded.next_log()
    assert guarded.events.empty()
    join(guarded.port, "algo-2", secret=SECRET)  # the worker itself is not kept out by it


def test_a_proof_for_another_connection_is_refused(guarded):
    """A join recorded on one connection cannot be replayed on another: the leader's nonce
    differs."""
    channel, _ = greeted(guarded.port)
    stale = auth.join_proof(SECRET, JOB, "algo-2", CONTROL_LINK, "an old nonce", "n")
    channel.send(Join("algo-2", JOB, CONTROL_LINK, "n", stale))
    assert_refused(channel, "does not match this job's secret")


def test_a_secret_the_leader_does_not_have_is_refused(leader):
    with pytest.raises(ConfigError, match="it proves a job secret, and this job has none"):
        join(leader.port, "algo-2", secret=SECRET)


class FakeLeader:
    """Greets as the job's leader would, and welcomes with `proof`."""

    def __init__(self, proof: str | None) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.proof = proof
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        connection, _ = self.listener.accept()
        channel = Channel(connection)
        channel.send(Greeting(JOB, "leader-nonce"))
        channel.receive_message(timeout=5.0)
        channel.send(Welcome(self.proof, "ssh-ed25519 AAAA swapped"))
        with contextlib.suppress(ChannelClosed):
            channel.receive_frame(timeout=5.0)  # until the worker hangs up


@pytest.mark.parametrize("proof", [None, "0" * 64], ids=["no proof", "a wrong proof"])
def test_a_leader_that_cannot_prove_the_secret_is_not_believed(proof):
    fake = FakeLeader(proof)
    try:
        with pytest.raises(ConfigError, match="is not this job's leader: its proof does not"):
            join(fake.port, "algo-2", secret=SECRET)
    finally:
        fake.listener.close()


def test_connections_that_never_join_are_bounded_and_the_rest_wait(monkeypatch):
    """Past MAX_UNIDENTIFIED the leader stops accepting: the next connection waits in the
    listen queue, not greeted, until a slot frees (closing it made 4,096 simulated workers
    reconnect 19,198 times while they joined)."""
    monkeypatch.setattr(control, "MAX_UNIDENTIFIED", 3)
    target = Leader()
    idle = [socket.create_connection(("127.0.0.1", target.port)) for _ in range(3)]
    try:
        for sock in idle:  # each one is greeted: it holds a slot
            assert Channel(sock).receive_message(timeout=5.0).kind == "greeting"
        extra = Channel(socket.create_connection(("127.0.0.1", target.port)))
        with pytest.raises(TimeoutError):  # not greeted while the slots are taken
            extra.receive_message(timeout=0.5)
        idle.pop().close()  # a slot frees as soon as one goes
        assert extra.receive_message(timeout=5.0).kind == "greeting"
        extra.close()
        target.join("algo-2")
    finally:
        for sock in idle:
            sock.close()
        target.close()


def test_a_join_must_come_whole_within_the_join_timeout(monkeypatch):
    """A peer sending a byte at a time gets no longer than one that sends nothing: it is
    refused at the join timeout, before its trickle (7 s at least) could finish."""
    monkeypatch.setattr(control, "JOIN_TIMEOUT", 0.5)
    target = Leader()
    sock = socket.create_connection(("127.0.0.1", target.port), timeout=5.0)
    stop = threading.Event()
    join = b'{"type":"join","host":"algo-2","pad":"' + b"x" * 100
    sent = []

    def trickle() -> None:
        for byte in join:
            if stop.wait(0.05):
                return
            try:
                sock.sendall(bytes([byte]))
            except OSError:  # closed by the leader
                return
            sent.append(byte)

    try:
        channel = Channel(sock)
        assert isinstance(channel.receive_message(timeout=5.0), Greeting)
        threading.Thread(target=trickle, daemon=True).start()
        assert_refused(channel, "no join within 0.5 s")
        assert len(sent) < len(join)  # refused before the trickle could finish
    finally:
        stop.set()
        sock.close()
        target.close()


def test_a_first_frame_longer_than_a_join_is_refused(leader):
    channel, _ = greeted(leader.port)
    channel.send_frame(b'{"type":"join","pad":"' + b"x" * control.JOIN_FRAME_BYTES)
    assert_refused(channel, f"frame longer than {control.JOIN_FRAME_BYTES} bytes")


def test_a_second_leader_on_the_port_names_the_running_job(leader):
    with pytest.raises(ConfigError) as caught:
        ControlServer(
            leader.port, leader.events, SLOW, lambda _f: None, [], lambda _l: None, Admission("b")
        )
    message = str(caught.value)
    assert f"port {leader.port} is already in use" in message
    assert f"the leader of the job {JOB!r} is running there" in message


def test_the_job_at_a_free_port_is_none():
    assert control.job_at(free_port()) is None


def test_the_secret_from_the_environment():
    assert auth.read_secret(None) is None
    assert auth.read_secret("") is None
    assert auth.read_secret(SECRET.hex()) == SECRET
    assert len(auth.read_secret(auth.new_secret()) or b"") == auth.SECRET_BYTES
    with pytest.raises(auth.BadSecret, match="hexadecimal"):
        auth.read_secret("not hex")
    with pytest.raises(auth.BadSecret, match="at least 16 bytes"):
        auth.read_secret("abcd")


def test_proofs_differ_by_every_field():
    base = ("job", "algo-2", CONTROL_LINK, "a", "b")
    proofs = {auth.join_proof(SECRET, *base)}
    for index in range(len(base)):
        changed = list(base)
        changed[index] += "x"
        proofs.add(auth.join_proof(SECRET, *changed))
    # moving a character from one field to the next changes the proof too
    proofs.add(auth.join_proof(SECRET, "jo", "balgo-2", CONTROL_LINK, "a", "b"))
    assert len(proofs) == len(base) + 2
    assert auth.proofs_match(auth.join_proof(SECRET, *base), auth.join_proof(SECRET, *base))
    assert not auth.proofs_match(auth.join_proof(SECRET, *base), None)


def test_the_accept_loop_survives_a_connection_it_cannot_serve(monkeypatch):
    """No thread to answer one join (a full process table): that connection is turned away,
    the next one is served."""
    refusals = []
    real_thread = threading.Thread

    class ScarceThread(real_thread):  # type: ignore[misc,valid-type]
        def start(self) -> None:
            serving = getattr(getattr(self, "_target", None), "__name__", "") == "_work"
            if serving and not refusals:
                refusals.append(self.name)
                raise RuntimeError("can't start new thread")
            super().start()

    monkeypatch.setattr(server_loop.threading, "Thread", ScarceThread)
    target = Leader()
    try:
        first = Channel(socket.create_connection(("127.0.0.1", target.port)))
        greeting = first.receive_message(timeout=5.0)
        assert isinstance(greeting, Greeting)
        first.send(Join("algo-2", JOB, CONTROL_LINK, "n", None))
        assert_closed_by_the_leader(first)
        assert "could not serve it (can't start new thread)" in target.next_log()
        target.join("algo-2")
    finally:
        target.close()
