"""A worker's state machine: report ready, relay rank events, obey the leader, exit its code.

The worker keeps its sshd (and so mpirun's daemon) alive until the leader sends the job's exit
code; it gives up when the leader stops answering (heartbeats) or never appears.
"""

import contextlib
import queue
import threading
import time
from collections.abc import Callable

from ringleader import exitcodes
from ringleader.agent import HostAgent
from ringleader.config import JobConfig
from ringleader.control import connect_to_leader, hello_message
from ringleader.eventloop import earliest, next_event
from ringleader.events import (
    Event,
    LeaderLost,
    LeaderMessage,
    RankEnded,
    RankStarted,
    SigtermReceived,
)
from ringleader.log import log
from ringleader.outcome import Outcome, truncate
from ringleader.output import OutputRelay
from ringleader.protocol import Channel, ChannelClosed


class Worker:
    def __init__(
        self,
        config: JobConfig,
        events: "queue.Queue[Event]",
        agent: HostAgent,
        stop: threading.Event,
        relay: OutputRelay,
    ) -> None:
        self._output_relay = relay
        self._told: Outcome | None = None  # the leader's verdict, once it came
        self._config = config
        self._events = events
        self._agent = agent
        self._stop = stop
        self._host = config.topology.current_host
        self._leader = config.topology.leader

    def run(self, on_outcome: Callable[[Outcome], None]) -> Outcome:
        """Follow the leader to the job's end; `on_outcome` writes the result files, before
        the leader hears that this host is done."""
        outcome = self._run(on_outcome)
        if self._told is None:
            on_outcome(outcome)
        return outcome

    def _run(self, on_outcome: Callable[[Outcome], None]) -> Outcome:
        timeouts = self._config.timeouts
        deadline = time.monotonic() + timeouts.startup
        channel = connect_to_leader(self._leader, self._config.control_port, deadline, self._stop)
        if channel is None:
            if self._stop.is_set():
                return self._outcome(exitcodes.SIGTERM_EXIT, "stopped by SIGTERM while waiting")
            return self._outcome(
                exitcodes.HOST_UNREACHABLE,
                f"the leader {self._leader} never answered on port {self._config.control_port} "
                f"within {timeouts.startup:g} s (ringleader_startup_timeout)",
            )
        self._output_relay.attach(channel)
        try:
            channel.send(hello_message(self._host))
        except ChannelClosed as error:
            return self._outcome(
                exitcodes.LEADER_LOST, f"the leader {self._leader} hung up: {error}"
            )
        threading.Thread(target=self._read_leader, args=(channel,), daemon=True).start()
        try:
            return self._follow(channel, on_outcome)
        finally:
            channel.close()

    def _follow(self, channel: Channel, on_outcome: Callable[[Outcome], None]) -> Outcome:
        timeouts = self._config.timeouts
        sigterm_deadline: float | None = None
        rank_deadline: float | None = None
        ranks_started = False
        while True:
            event = next_event(self._events, earliest(sigterm_deadline, rank_deadline))
            if event is None:
                self._agent.terminate_all()
                if sigterm_deadline is not None and time.monotonic() >= sigterm_deadline:
                    return self._outcome(
                        exitcodes.SIGTERM_EXIT,
                        "stopped by SIGTERM; the leader did not confirm the job's end in time",
                    )
                return self._outcome(
                    exitcodes.HOST_UNREACHABLE,
                    f"the MPI daemon never started a rank on {self._host} within "
                    f"{timeouts.startup:g} s of the launch (ringleader_startup_timeout)",
                )
            if isinstance(event, RankStarted | RankEnded):
                ranks_started = True
                rank_deadline = None
                self._relay(channel, event)
            elif isinstance(event, SigtermReceived):
                log("SIGTERM received: stopping local ranks and telling the leader")
                self._agent.terminate_all()
                self._send(channel, {"type": "sigterm", "host": self._host})
                if sigterm_deadline is None:
                    sigterm_deadline = time.monotonic() + timeouts.sigterm_grace + timeouts.finish
            elif isinstance(event, LeaderLost):
                self._agent.terminate_all()
                self._agent.reap(timeouts.abort_grace, timeouts.abort_grace)
                code = exitcodes.SIGTERM_EXIT if sigterm_deadline else exitcodes.LEADER_LOST
                return self._outcome(code, f"lost the leader {self._leader}: {event.reason}")
            elif isinstance(event, LeaderMessage):
                kind = event.message.get("type")
                if kind == "launched" and not ranks_started:
                    rank_deadline = time.monotonic() + timeouts.startup
                elif kind == "terminate":
                    self._agent.terminate_all()
                elif kind == "exit":
                    self._agent.reap(timeouts.sigterm_grace, timeouts.abort_grace)
                    outcome = Outcome(int(event.message["code"]), event.message.get("failure"))
                    self._told = outcome
                    on_outcome(outcome)  # files first, then bye, then let the leader go first
                    self._send(channel, {"type": "bye", "host": self._host})
                    self._wait_for_leader_to_leave(timeouts.finish + timeouts.leader_loss)
                    return outcome

    def _wait_for_leader_to_leave(self, timeout: float) -> None:
        """After bye: the leader closes the connection when it exits (bounded wait)."""
        deadline = time.monotonic() + timeout
        while (event := next_event(self._events, deadline)) is not None:
            if isinstance(event, LeaderLost):
                return

    def _relay(self, channel: Channel, event: RankStarted | RankEnded) -> None:
        if isinstance(event, RankStarted):
            self._send(channel, {"type": "rank-start", "rank": event.rank, "host": event.host})
        else:
            self._send(channel, {"type": "rank-end", "record": event.record.to_json()})

    def _send(self, channel: Channel, message: dict[str, object]) -> None:
        # A broken channel shows up as LeaderLost from the reader thread.
        with contextlib.suppress(ChannelClosed):
            channel.send(message)

    def _read_leader(self, channel: Channel) -> None:
        timeout = self._config.timeouts.leader_loss
        while True:
            try:
                message = channel.receive(timeout=timeout)
            except TimeoutError:
                self._events.put(
                    LeaderLost(f"no heartbeat for {timeout:g} s (ringleader_leader_timeout)")
                )
                return
            except ChannelClosed as error:
                self._events.put(LeaderLost(f"connection closed ({error})"))
                return
            if message.get("type") != "heartbeat":
                self._events.put(LeaderMessage(message))

    def _outcome(self, code: int, problem: str) -> Outcome:
        return Outcome(code, truncate(f"Host {self._host}: {problem}."))


def outlive_leader(channel: Channel, deadline: float) -> None:
    """Read until the leader closes the connection (it exits) or the deadline passes."""
    while (remaining := deadline - time.monotonic()) > 0:
        try:
            channel.receive(timeout=remaining)
        except (ChannelClosed, TimeoutError):
            return
