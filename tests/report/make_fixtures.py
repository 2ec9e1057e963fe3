"""Writes tests/report/fixtures/: what a failed 3-host x 2-rank Horovod job leaves behind.

`python tests/report/make_fixtures.py` regenerates the files (deterministic). The layout is
`ringleader local`'s OUTPUT/<job>/<host>/output/..., the timeline uses Horovod 0.28's exact
text shapes (horovod/common/timeline.cc) and is cut off mid-event as after a crash, and the
autotune log has Horovod 0.28's header (horovod/common/parameter_manager.cc).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
JOB = HERE / "fixtures" / "local-job"
T0 = 1750000000.0  # first rank starts
HOSTS = ("algo-1", "algo-2", "algo-3")
RANKS = [(rank, HOSTS[rank // 2]) for rank in range(6)]
FAILED_RANK = 4
FAIL_AT = 8.4  # seconds after T0
TENSORS = ("allreduce.fc1.weight", "allreduce.fc1.bias", "allreduce.fc2.weight")
STDERR_TAIL = [
    "Traceback (most recent call last):",
    '  File "/opt/ml/code/train.py", line 88, in <module>',
    "    check(loss)",
    '  File "/opt/ml/code/train.py", line 41, in check',
    '    raise ValueError(f"loss diverged: {loss}")',
    "ValueError: loss diverged: nan",
]


def rank_records() -> list[dict[str, object]]:
    records = []
    for rank, host in RANKS:
        started = T0 + 0.05 * rank
        if rank == FAILED_RANK:
            record = {
                "exit_code": 3,
                "signal": None,
                "ended_at": T0 + FAIL_AT,
                "terminated": False,
                "stderr_tail": STDERR_TAIL,
            }
        else:
            record = {
                "exit_code": 143,
                "signal": 15,
                "ended_at": T0 + FAIL_AT + 0.3 + 0.02 * rank,
                "terminated": True,
                "stderr_tail": ["Horovod has been shut down."],
            }
        records.append({"rank": rank, "host": host, "started_at": started, **record})
    return records


def failure_text() -> str:
    return (
        f"Rank {FAILED_RANK} on host algo-3 exited with code 3\n"
        "Last lines of its stderr:\n" + "\n".join(STDERR_TAIL) + "\n"
    )


def job_json(records: list[dict[str, object]]) -> str:
    job = {
        "exit_code": 3,
        "failure": failure_text(),
        "hosts": list(HOSTS),
        "world_size": len(RANKS),
        "root_cause": records[FAILED_RANK],
        "ranks": records,
    }
    return json.dumps(job, indent=2) + "\n"


def metrics_lines(host: str, rng: random.Random) -> str:
    lines = []
    for rank, rank_host in RANKS:
        if rank_host != host:
            continue
        for step in range(1, 17):
            t = T0 + 1.0 + step * 0.45 + 0.01 * rank
            if t > T0 + FAIL_AT:
                break
            loss = 2.3 * math.exp(-step / 6) + 0.05 * rng.random()
            if rank == FAILED_RANK and step >= 15:
                loss = 2.0 + step * 0.3
            rate = 410 + 25 * rng.random() - (60 if rank == FAILED_RANK else 0)
            for name, value in (("loss", loss), ("samples_per_sec", rate)):
                point = {
                    "timestamp": round(t, 3),
                    "name": name,
                    "value": round(value, 4),
                    "rank": rank,
                    "host": host,
                }
                lines.append(json.dumps(point))
    return "\n".join(lines) + "\n"


def timeline(rng: random.Random) -> str:
    """Horovod's writer: a header, then events; a new tensor's two metadata lines first."""
    out = ["[\n"]
    epoch_us = int((T0 + 1.2) * 1e6)
    out.append(
        '{"name": "process_name", "ph": "M", "pid": 0, "args": '
        f'{{"start_time_since_epoch_in_micros":{epoch_us}}}}},\n'
    )
    out.append('{"name": "process_sort_index", "ph": "M", "pid": 0, "args": {"sort_index": 0}},\n')
    events: list[str] = []
    declared: set[int] = set()

    def event(pid: int, phase: str, ts: int, name: str = "", extra: str = "") -> None:
        prefix = ""
        if pid not in declared:  # a new tensor: its metadata, each line ending in ",\n"
            declared.add(pid)
            prefix = (
                f'{{"name": "process_name", "ph": "M", "pid": {pid}, '
                f'"args": {{"name": "{TENSORS[pid - 1]}"}}}},\n'
                f'{{"name": "process_sort_index", "ph": "M", "pid": {pid}, '
                f'"args": {{"sort_index": {pid}}}}},\n'
            )
        text = f'{{"ph": "{phase}"'
        if phase != "E":
            text += f', "name": "{name}"'
        text += f', "ts": {ts}, "pid": {pid}'
        if phase == "X":
            text += ', "dur": 0'
        if extra:
            text += f', "args": {{{extra}}}'
        events.append(prefix + text + "}")

    shapes = {1: "[512, 784]", 2: "[512]", 3: "[10, 512]"}
    ts = 150_000
    for _ in range(12):
        events.append(f'{{"ph": "i", "name": "CYCLE_START", "ts": {ts}, "s": "g"}}')
        for pid in (1, 2, 3):
            start = ts
            event(pid, "B", start, "NEGOTIATE_ALLREDUCE")
            ready = {r: start + rng.randint(50, 900) for r in range(6)}
            ready[FAILED_RANK] = start + rng.randint(2500, 4000)  # the straggler
            for r, at in sorted(ready.items(), key=lambda item: item[1]):
                event(pid, "X", at, str(r))
            end = max(ready.values()) + rng.randint(40, 120)
            event(pid, "E", end)
            size = {1: 9000, 2: 300, 3: 1800}[pid]
            t = end + 30
            event(pid, "B", t, "ALLREDUCE")
            for activity, cost in (
                ("QUEUE", 60),
                ("MEMCPY_IN_FUSION_BUFFER", size // 10),
                ("MPI_ALLREDUCE", size),
                ("MEMCPY_OUT_FUSION_BUFFER", size // 12),
            ):
                event(pid, "B", t, activity)
                t += cost + rng.randint(0, cost // 5 + 1)
                event(pid, "E", t)
            t += 20
            event(pid, "E", t, extra=f'"dtype": "float32", "shape": "{shapes[pid]}"')
            ts = t + 200
        ts += 40_000
    # events follow each other with a bare comma (Horovod overwrites its `]` with one); the
    # file is cut off inside the last event, as when the process is killed mid-write
    body = ",".join(events)
    return "".join(out) + body[: len(body) - 17]


def autotune_csv() -> str:
    header = (
        "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,"
        "cycle_time_ms,tensor_fusion_threshold,score"
    )
    rows = [
        "0,0,0, 0,5,4,212.518",
        "0,0,0, 0,50,32,171.204",
        "0,0,0, 0,25,16,233.91",
        "0,0,0, 0,10,8,268.377",
        "0,0,0, 0,3.51882,12.4417,301.062",
        "0,0,0, 0,1,64,254.843",
        "0,0,0, 0,7.25,2.125,289.4",
    ]
    return header + "\n" + "\n".join(rows) + "\n"


def rank_log(rank: int, host: str) -> str:
    lines = [f"[{rank},{host}] starting train.py, Horovod size 6"]
    lines += [f"step {s} loss {2.3 * math.exp(-s / 6):.4f}" for s in range(1, 15)]
    lines += STDERR_TAIL if rank == FAILED_RANK else ["Horovod has been shut down."]
    return "\n".join(lines) + "\n"


def main() -> None:
    rng = random.Random(7)
    records = rank_records()
    for host in HOSTS:
        output = JOB / host / "output"
        data = output / "data"
        (data / "logs" / host).mkdir(parents=True, exist_ok=True)
        (output / "failure").write_text(failure_text())
        (data / "metrics.jsonl").write_text(metrics_lines(host, rng))
        for rank, rank_host in RANKS:
            if rank_host == host:
                (data / "logs" / host / f"rank-{rank}.log").write_text(rank_log(rank, host))
    leader = JOB / HOSTS[0] / "output" / "data"
    (leader / "job.json").write_text(job_json(records))
    (leader / "horovod_timeline.json").write_text(timeline(rng))
    (leader / "horovod_autotune_log.csv").write_text(autotune_csv())


if __name__ == "__main__":
    main()
