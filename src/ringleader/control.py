"""The control channel between the leader and its workers (TCP, newline-delimited JSON).

Worker -> leader: hello (sshd is up, or a configuration error), rank-start, output and rank-end
relayed from its host agent, sigterm (SIGTERM arrived on that host), bye (exit code received).
Leader -> worker: heartbeat (so a worker notices a lost leader within the leader timeout),
terminate (stop your ranks), exit (the job's exit code and failure text; reply bye, then exit).
"""

import contextlib
import queue
import socket
import threading
import time
from typing import Any

from ringleader.events import (
    Event,
    RankEnded,
    RankStarted,
    SigtermReceived,
    WorkerBye,
    WorkerHello,
    WorkerLost,
)
from ringleader.output import OutputHandler
from ringleader.protocol import (
    OUTPUT_PREFIX,
    Channel,
    ChannelClosed,
    Message,
    close_listener,
    decode,
    serve_connections,
)
from ringleader.records import RankRecord


class ControlServer:
    """Runs on the leader: accepts workers, relays their events, heartbeats, broadcasts."""

    def __init__(
        self,
        port: int,
        events: "queue.Queue[Event]",
        heartbeat_interval: float,
        on_output: OutputHandler,
    ) -> None:
        self._events = events
        self._on_output = on_output
        self._lock = threading.Lock()
        self._workers: dict[str, Channel] = {}
        self._final: Message | None = None
        self._stop = threading.Event()
        self._server = socket.create_server(("", port), backlog=256)
        threading.Thread(
            target=serve_connections, args=(self._server, self._serve), daemon=True
        ).start()
        threading.Thread(
            target=self._heartbeat_loop, args=(heartbeat_interval,), daemon=True
        ).start()

    def broadcast(self, message: Message) -> None:
        with self._lock:
            channels = list(self._workers.values())
        for channel in channels:
            with contextlib.suppress(ChannelClosed):
                channel.send(message)

    def finish(self, exit_code: int, failure: str | None) -> None:
        """Send the job's result to every worker, including ones that connect from now on."""
        message: Message = {"type": "exit", "code": exit_code, "failure": failure}
        with self._lock:
            self._final = message
        self.broadcast(message)

    def close(self) -> None:
        self._stop.set()
        close_listener(self._server)
        with self._lock:
            channels = list(self._workers.values())
        for channel in channels:
            channel.close()

    def _heartbeat_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self.broadcast({"type": "heartbeat"})

    def _serve(self, channel: Channel) -> None:
        host = None
        try:
            hello = channel.receive(timeout=30.0)
            if hello.get("type") != "hello":
                return
            host = str(hello["host"])
            error = hello.get("error")
            with self._lock:
                self._workers[host] = channel
                final = self._final
            if isinstance(error, dict):
                self._events.put(WorkerHello(host, int(error["code"]), str(error["message"])))
            else:
                self._events.put(WorkerHello(host))
            if final is not None:
                channel.send(final)
            while True:
                line = channel.receive_bytes(timeout=None)
                if line.startswith(OUTPUT_PREFIX):
                    self._on_output(line)
                else:
                    self._dispatch(host, decode(line))
        except (ChannelClosed, TimeoutError, KeyError, ValueError) as error:
            if host is not None:
                self._events.put(WorkerLost(host, str(error) or type(error).__name__))
        finally:
            if host is not None:
                with self._lock:
                    if self._workers.get(host) is channel:
                        del self._workers[host]
            channel.close()

    def _dispatch(self, host: str, message: Message) -> None:
        kind = message.get("type")
        if kind == "rank-start":
            self._events.put(RankStarted(int(message["rank"]), str(message["host"])))
        elif kind == "rank-end":
            self._events.put(RankEnded(RankRecord.from_json(message["record"])))
        elif kind == "sigterm":
            self._events.put(SigtermReceived(host))
        elif kind == "bye":
            self._events.put(WorkerBye(host))


def connect_to_leader(
    leader: str, port: int, deadline: float, stop: threading.Event
) -> Channel | None:
    """Connect, retrying while the leader's container or server is not up yet.

    Returns None when `deadline` (a time.monotonic() value) passes or `stop` is set. The retry
    delay grows from 50 ms to 1 s: fast when hosts start together, cheap when one is late.
    """
    delay = 0.05
    while not stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            sock = socket.create_connection((leader, port), timeout=min(remaining, 5.0))
        except OSError:
            stop.wait(min(delay, max(deadline - time.monotonic(), 0)))
            delay = min(delay * 2, 1.0)
            continue
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return Channel(sock)
    return None


def hello_message(host: str, error: tuple[int, str] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"type": "hello", "host": host}
    if error is not None:
        message["error"] = {"code": error[0], "message": error[1]}
    return message
