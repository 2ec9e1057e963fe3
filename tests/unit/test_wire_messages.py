"""The control messages' one codec: every kind round-trips, and what is not a message of this
protocol is a ProtocolError."""

import json

import pytest

from ringleader.core.health import CheckResult, LinkSpeed
from ringleader.core.progress import RankStep
from ringleader.core.records import RankRecord
from ringleader.core.stacks import Frame, ProcessStacks, RankStacks, ThreadStack
from ringleader.core.straggler import WaitCount
from ringleader.core.timeline import Mark
from ringleader.launch.spawn import SpawnSpec
from ringleader.wire.messages import (
    HANG,
    ON_DEMAND,
    Ack,
    Bye,
    DumpStacks,
    ErrorReport,
    Exit,
    Greeting,
    Hello,
    Join,
    Launched,
    Message,
    Probed,
    ProbePeers,
    Progress,
    Pulse,
    RankEnd,
    RanksExit,
    RankStart,
    Ready,
    Refused,
    Restart,
    Sigterm,
    Stacks,
    StacksWanted,
    Terminate,
    UnknownMessage,
    Welcome,
    decode,
    encode,
)
from ringleader.wire.protocol import ProtocolError

RECORD = RankRecord(
    rank=3,
    host="algo-2",
    exit_code=137,
    signal=9,
    started_at=100.0,
    ended_at=101.5,
    terminated=True,
    stderr_tail=("Traceback", "ValueError: é"),
    error=("ValueError: x",),
    role="ps:1",
    first_output_at=100.25,
    daemon_started_at=99.5,
    wrapper_started_at=99.75,
)
# hosts, processes per host, master address and port, run id, interface, torch; a plain host
SPEC = SpawnSpec(("algo-1", "algo-2"), 2, "algo-1", 29500, "job", "eth0", True, ("algo-3",), 4)
STACKS = RankStacks(
    4,
    "algo-3",
    1795600000.5,
    (
        ProcessStacks(
            41,
            "python train.py",
            "py-spy",
            (
                ThreadStack(
                    "MainThread",
                    (
                        Frame("clock_nanosleep", "/lib/libc.so.6", native=True),
                        Frame("load_batch_forever", "/opt/ml/code/train.py", 12),
                    ),
                    main=True,
                    state="idle",
                ),
            ),
            "S (sleeping) in hrtimer_nanosleep",
            'Thread 41 (idle): "MainThread"',
        ),
    ),
    ("py-spy: not permitted",),
    ("Missing ranks:", "4: [allreduce.noname.1]"),
)
MARKS = (Mark("algo-2", "sshd", 12.5), Mark("algo-2", "hello", 12.75))

LINK = LinkSpeed("algo-2", "algo-3", 0.0002, 1.5e9)
EVERY_KIND: list[Message] = [
    Greeting("job-1", "0f3c"),
    Join("algo-2", "job-1", "control", "9a1b"),
    Join("algo-2", "job-1", "pulse", "9a1b", "c0ffee"),
    Welcome(),
    Welcome("c0ffee", "ssh-ed25519 AAAA job"),
    Welcome("c0ffee", "ssh-ed25519 AAAA job", ("10.0.2.5",)),
    Join("algo-2", "job-1", "probe", "9a1b"),
    Refused("algo-2 joined already"),
    Hello("algo-2"),
    Hello("algo-2", host_key="ssh-ed25519 AAAA algo-2"),
    Hello("algo-2", timeline=MARKS),
    Hello("algo-2", sent_at=1795600000.25),  # the worker's clock, for the leader's offset
    Hello("algo-3", ErrorReport(78, "Configuration error in sagemaker_program: x")),
    Hello("algo-2", probe_address="10.0.2.6"),
    ProbePeers((("algo-2", "10.0.2.6"), ("algo-3", "10.0.2.7"))),
    ProbePeers(()),
    Probed(
        "algo-2",
        (CheckResult("reach algo-3", "ok", "fast", LinkSpeed("algo-2", "algo-3", 0.0002, 1.5e9)),),
    ),
    Probed("algo-2", (CheckResult("reach algo-3", "failed", "cannot connect"),)),
    Bye("algo-2", MARKS),
    Bye("algo-2"),
    Pulse(),
    Launched(),
    Launched(SPEC),
    Terminate(30.0),
    Terminate(0.5),
    Exit(3, "Rank 4 on host algo-3 exited with code 3.\n"),
    Exit(0, None),
    RankStart(3, "algo-2", pid=4321),
    RankStart(3, "algo-2"),
    RankStart(3, "algo-2", pid=4321, attempt=2),
    Restart(1),
    Ready("algo-2", 1),
    RankEnd(RECORD),
    RanksExit("algo-2", 137),
    Sigterm("algo-2"),
    Ack(),
    Progress("algo-2", (2, 3)),
    Progress("algo-2", (2,), (RankStep(2, 40, 100),), (WaitCount(2, 12, 3),)),
    Progress("algo-2", (), (), (WaitCount(3, 5, 0),)),
    DumpStacks(HANG),
    DumpStacks(ON_DEMAND),
    Stacks(HANG, STACKS),
    Stacks(ON_DEMAND, RankStacks(0, "algo-1", 1.5)),
    StacksWanted("algo-2"),
]


@pytest.mark.parametrize("message", EVERY_KIND, ids=repr)
def test_every_kind_round_trips(message):
    frame = encode(message)
    assert b"\n" not in frame  # one frame, one line
    assert decode(frame) == message


def test_every_kind_is_covered():
    covered = {type(message) for message in EVERY_KIND}
    assert covered == set(Message.__args__)


@pytest.mark.parametrize(
    ("message", "wire"),
    [
        # What peers and tests have always seen: key order, optional fields left out.
        (Pulse(), b'{"type":"pulse"}'),
        (Ack(), b'{"type":"ack"}'),
        (Greeting("job-1", "0f"), b'{"type":"greeting","job":"job-1","nonce":"0f"}'),
        (
            Join("algo-2", "job-1", "pulse", "9a"),
            b'{"type":"join","host":"algo-2","job":"job-1","link":"pulse","nonce":"9a"}',
        ),
        (Welcome(), b'{"type":"welcome"}'),
        (Hello("algo-2"), b'{"type":"hello","host":"algo-2"}'),
        (
            Hello("algo-3", ErrorReport(78, "bad")),
            b'{"type":"hello","host":"algo-3","error":{"code":78,"message":"bad"}}',
        ),
        (Bye("algo-2"), b'{"type":"bye","host":"algo-2","timeline":[]}'),
        (Launched(), b'{"type":"launched"}'),
        (Terminate(5.0), b'{"type":"terminate","grace":5.0}'),
        (Exit(0, None), b'{"type":"exit","code":0,"failure":null}'),
        (RankStart(1, "algo-2"), b'{"type":"rank-start","rank":1,"host":"algo-2"}'),
        (
            RankStart(1, "algo-2", 77),
            b'{"type":"rank-start","rank":1,"host":"algo-2","pid":77}',
        ),
        (RanksExit("algo-2", 0), b'{"type":"ranks-exited","host":"algo-2","code":0}'),
        (Sigterm("algo-2"), b'{"type":"sigterm","host":"algo-2"}'),
    ],
)
def test_the_json_on_the_wire(message, wire):
    assert encode(message) == wire


def test_a_rank_record_travels_whole():
    wire = json.loads(encode(RankEnd(RECORD)))
    assert wire == {"type": "rank-end", "record": RECORD.to_json()}
    decoded = decode(encode(RankEnd(RECORD)))
    assert isinstance(decoded, RankEnd)
    assert decoded.record == RECORD


def test_unknown_kind_is_a_protocol_error():
    with pytest.raises(UnknownMessage, match="from-the-future") as caught:
        decode(b'{"type":"from-the-future","x":1}')
    assert caught.value.kind == "from-the-future"
    assert isinstance(caught.value, ProtocolError)


@pytest.mark.parametrize(
    ("frame", "field"),
    [
        (b'{"type":"greeting"}', "job"),
        (b'{"type":"greeting","job":7}', "job"),
        (b'{"type":"hello"}', "host"),
        (b'{"type":"hello","host":3}', "host"),
        (b'{"type":"hello","host":"algo-2","error":"bad"}', "error"),
        (b'{"type":"hello","host":"algo-2","error":{"code":"78","message":"x"}}', "code"),
        (b'{"type":"hello","host":"algo-2","error":{"code":78}}', "message"),
        (b'{"type":"hello","host":"algo-2","timeline":"12.5"}', "timeline"),
        (b'{"type":"bye","host":null}', "host"),
        (b'{"type":"join","host":"algo-2","job":"j","link":"pulse","nonce":7}', "nonce"),
        (b'{"type":"progress","host":"algo-2","ranks":[2,"3"]}', "ranks"),
        (b'{"type":"progress","host":"algo-2","ranks":{"2":1}}', "ranks"),
        (b'{"type":"progress","host":"algo-2","ranks":[2],"steps":[[2,"x",null]]}', "steps"),
        (b'{"type":"progress","host":"algo-2","ranks":[],"waits":[[2,3,4]]}', "waits"),
        (b'{"type":"progress","host":"algo-2","ranks":[],"waits":[[2,3]]}', "waits"),
        (b'{"type":"dump-stacks"}', "reason"),
        (b'{"type":"stacks","reason":"hang","stacks":{"rank":4}}', "stacks"),
        (b'{"type":"launched","spawn":[]}', "spawn"),
        (b'{"type":"launched","spawn":{"hosts":["algo-1"]}}', "spawn"),
        (b'{"type":"terminate","grace":"30"}', "grace"),
        (b'{"type":"terminate","grace":true}', "grace"),
        (b'{"type":"exit","failure":null}', "code"),
        (b'{"type":"exit","code":3.5,"failure":null}', "code"),
        (b'{"type":"exit","code":3,"failure":7}', "failure"),
        (b'{"type":"rank-start","rank":"one","host":"algo-2"}', "rank"),
        (b'{"type":"rank-start","rank":true,"host":"algo-2"}', "rank"),
        (b'{"type":"rank-start","rank":1,"host":"algo-2","pid":"77"}', "pid"),
        (b'{"type":"rank-end","record":"x"}', "record"),
        (b'{"type":"rank-end"}', "record"),
        (b'{"type":"ranks-exited","host":"algo-2","code":null}', "code"),
        (b'{"type":"sigterm"}', "host"),
        (b'{"type":"welcome","probe_addresses":[7]}', "probe_addresses"),
        (b'{"type":"welcome","probe_addresses":"10.0.2.5"}', "probe_addresses"),
        (b'{"type":"probe-peers","peers":[["algo-2"]]}', "peers"),
        (b'{"type":"probe-peers","peers":[["algo-2",7]]}', "peers"),
        (b'{"type":"probed","health":[]}', "host"),
        (b'{"type":"probed","host":"algo-2","health":[{"name":"x"}]}', "health"),
        (
            b'{"type":"probed","host":"algo-2","health":[{"name":"x","status":"ok",'
            b'"detail":"","link":{"source":"a","target":"b","round_trip":-1,"bandwidth":1}}]}',
            "health",
        ),
    ],
)
def test_a_field_missing_or_of_the_wrong_type_is_a_protocol_error(frame, field):
    with pytest.raises(ProtocolError, match=f"malformed .*'{field}'") as caught:
        decode(frame)
    assert not isinstance(caught.value, UnknownMessage)


def test_a_terminate_without_grace_is_a_protocol_error():
    # The grace is read here, once: whoever obeys a Terminate has a number.
    with pytest.raises(ProtocolError, match="malformed terminate message: 'grace'"):
        decode(b'{"type":"terminate"}')


@pytest.mark.parametrize(
    "record",
    [
        {"rank": 1},  # its fields missing
        {**RECORD.to_json(), "exit_code": "three"},
        {**RECORD.to_json(), "started_at": None},
        {**RECORD.to_json(), "stderr_tail": 5},
    ],
)
def test_a_malformed_rank_record_is_a_protocol_error(record):
    frame = json.dumps({"type": "rank-end", "record": record}).encode()
    with pytest.raises(ProtocolError, match="malformed rank-end message: 'record'"):
        decode(frame)


@pytest.mark.parametrize(
    ("frame", "problem"),
    [
        (b"not json", "unknown frame kind"),
        (b'O{"rank":1}', "unknown frame kind"),  # an output frame is not a message
        (b"{not json", "garbled"),
        (b'{"host":"algo-2"}', "without a type"),
        (b'{"type":3}', "without a type"),
    ],
)
def test_what_is_not_a_control_frame_is_a_protocol_error(frame, problem):
    with pytest.raises(ProtocolError, match=problem):
        decode(frame)


def test_unreadable_timeline_marks_are_left_out():
    # Marks are only for the timeline: one that cannot be read does not cost the hello.
    frame = json.dumps(
        {"type": "hello", "host": "algo-2", "timeline": [MARKS[0].to_json(), {"at": 1}, 3]}
    ).encode()
    assert decode(frame) == Hello("algo-2", timeline=MARKS[:1])
