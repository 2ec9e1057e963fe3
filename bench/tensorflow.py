"""TensorFlow through ringleader vs the same processes started by hand with the same TF_CONFIG:
same image (ringleader:tensorflow), same fake hosts, same scripts (examples/tf_ps_train.py in
SageMaker's master layout and with TF2 chief roles, examples/tf_mwms_train.py), runs alternating
(who goes first alternating too).

For each run: the job's steps/s and the time from the main task's end (the chief; for MWMS the
last worker) to every container exited. The job's steps/s comes from the rates the tasks that
run the script report: in SageMaker's master layout master and workers each train their own
share of the global steps, so their rates add up; with TF2 chief roles only the chief reports;
with MWMS every worker takes every step together, so their rates are averaged. (Pinning TF's
thread pools to one thread each, to cut the run-to-run spread of up to 30%, hung the TF2
ClusterCoordinator run for over 5 minutes: it needs more than one inter-op thread.) By hand, each
container's shell starts its parameter server in the background and execs its task; servers
never end on their own, so after the chief's container exits the bench kills the others, as a
person would have to (their teardown is reported as "never").

Usage: .venv/bin/python bench/tensorflow.py [--rounds 3] [--steps 300] [--only LABEL]
"""

import argparse
import io
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import docker

from ringleader.launch import tfconfig
from ringleader.tools.local.plan import LocalJobSpec, host_names
from ringleader.tools.local.run import LocalJob

BENCH = Path(__file__).resolve().parent
IMAGE = "ringleader:tensorflow"
PYTHON = "/opt/ringleader/venv/bin/python"
HOSTS = 3
RATE = re.compile(r"done: .*\(([0-9.]+) steps/s\)")
SCRIPTS = {
    "parameter_server": "tf_ps_train.py",
    "multi_worker_mirrored_strategy": "tf_mwms_train.py",
}
# (label, distribution, ringleader_tf_roles)
CONFIGURATIONS = (
    ("parameter_server (master)", "parameter_server", tfconfig.MASTER_ROLES),
    ("parameter_server (chief)", "parameter_server", tfconfig.CHIEF_ROLES),
    ("multi_worker_mirrored_strategy", "multi_worker_mirrored_strategy", tfconfig.CHIEF_ROLES),
)


@dataclass(frozen=True)
class Measurement:
    steps_per_second: float | None
    teardown: float | None  # main task's end -> every container exited; None: never by itself


def by_hand_commands(
    distribution: str, roles: str, names: list[str], script_args: list[str]
) -> dict:
    """host -> (TF_CONFIG of its task, shell command) as a person would start them."""
    commands = {}
    ports = tfconfig.TfPorts()
    for name in names:
        tasks = tfconfig.host_tasks(distribution, names, name, roles, ports)
        tasks.sort(key=lambda task: task.runs_script)  # the script last, in the foreground
        parts = []
        for task in tasks:
            env = f"TF_CONFIG='{task.tf_config}'"
            if task.runs_script:
                run = f"{PYTHON} /opt/ml/code/tf_probe.py {' '.join(script_args)}"
            else:
                run = f"{PYTHON} -m {tfconfig.__name__}"
            parts.append(f"{env} {run}")
        # the last task in the foreground: the container lives as long as it does
        commands[name] = " & ".join([*parts[:-1], f"exec env {parts[-1]}"])
    return commands


def run(
    runner: str, distribution: str, roles: str, steps: int, source: Path, workdir: Path
) -> Measurement:
    names = host_names(HOSTS, random_suffix=False)
    script_args = ["--steps", str(steps), "--log-interval", str(steps)]
    common = {"hosts": HOSTS, "source_dir": source, "image": IMAGE, "output_dir": workdir}
    probe = {name: {"TF_PROBE_SCRIPT": SCRIPTS[distribution]} for name in names}
    if runner == "ringleader":
        spec = LocalJobSpec(
            **common,
            entry_point="tf_probe.py",
            distribution=distribution,
            settings={"tf_roles": roles},
            hyperparameters={"steps": str(steps), "log-interval": str(steps)},
            env_overrides=probe,
        )
    else:
        commands = by_hand_commands(distribution, roles, names, script_args)
        spec = LocalJobSpec(
            **common,
            entry_point="tf_probe.py",
            distribution="none",
            entrypoint=("/bin/sh", "-c"),
            command=('eval "$BENCH_COMMAND"',),
            env_overrides={
                name: {**probe[name], "BENCH_COMMAND": commands[name]} for name in names
            },
        )
    out = io.StringIO()
    job = LocalJob(spec, out, docker.from_env())
    result_box = {}
    thread = threading.Thread(target=lambda: result_box.update(result=job.run()), daemon=True)
    thread.start()
    killed = False
    if runner == "by hand" and distribution == "parameter_server":
        client = docker.from_env()
        deadline = time.monotonic() + 600
        while thread.is_alive() and time.monotonic() < deadline:
            ids = job.container_ids
            if names[0] in ids:
                try:
                    state = client.api.inspect_container(ids[names[0]])["State"]
                except docker.errors.NotFound:
                    break
                if state["Status"] == "exited":
                    # servers never end: a person has to stop them (in SageMaker's master
                    # layout a host whose worker script ended has exited by itself)
                    for name in names[1:]:
                        try:
                            client.api.kill(ids[name])
                            killed = True
                        except docker.errors.APIError as error:
                            if error.status_code != 409:  # 409: it is not running
                                raise
                    break
            time.sleep(0.2)
    thread.join(900)
    result = result_box["result"]
    output = out.getvalue()
    rates = [float(value) for value in RATE.findall(output)]
    ends = [float(v) for v in re.findall(r"BENCH end \S+ (\d+\.\d{6})", output)]
    last_exit = max(host.finished_at for host in result.hosts)
    teardown = None if killed or not ends else last_exit - max(ends)
    return Measurement(job_rate(distribution, roles, rates), teardown)


def job_rate(distribution: str, roles: str, rates: list[float]) -> float | None:
    """The job's steps/s from the rates its tasks reported (see the module's docstring)."""
    if not rates:
        return None
    if distribution == "parameter_server" and roles == tfconfig.MASTER_ROLES:
        return sum(rates)
    return statistics.mean(rates)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument(
        "--only",
        choices=[label for label, _, _ in CONFIGURATIONS],
        help="one configuration (longer runs of it cost less time)",
    )
    args = parser.parse_args()
    runners = ("by hand", "ringleader")
    rows = []
    with tempfile.TemporaryDirectory(prefix="rl-bench-tf-") as tmp:
        source = Path(tmp) / "code"
        source.mkdir()
        shutil.copy(BENCH / "probe" / "tf_probe.py", source)
        for script in SCRIPTS.values():
            shutil.copy(BENCH.parent / "examples" / script, source)
        for label, distribution, roles in CONFIGURATIONS:
            if args.only and label != args.only:
                continue
            results: dict[str, list[Measurement]] = {runner: [] for runner in runners}
            for round_number in range(1, args.rounds + 1):
                # who goes first alternates: the second must not always get a warmer machine
                for runner in runners[:: 1 if round_number % 2 else -1]:
                    print(f"... {label} round {round_number}: {runner}", file=sys.stderr)
                    results[runner].append(
                        run(runner, distribution, roles, args.steps, source, Path(tmp) / "out")
                    )
            rows.append((label, results))
    print(f"TensorFlow on {HOSTS} hosts, {args.steps} steps, {args.rounds} runs each (median)")
    print(f"{'distribution':<32}{'runner':<12}{'steps/s':>9}{'teardown s':>12}  runs (steps/s)")
    for distribution, results in rows:
        medians = {}
        for runner in runners:
            rates = [m.steps_per_second for m in results[runner] if m.steps_per_second]
            downs = [m.teardown for m in results[runner] if m.teardown is not None]
            rate = statistics.median(rates) if rates else None
            down = statistics.median(downs) if downs else None
            medians[runner] = rate
            listed = " ".join(f"{r:.1f}" for r in rates)
            print(
                f"{distribution:<32}{runner:<12}{rate or 0:>9.1f}"
                f"{'never' if down is None else f'{down:.2f}':>12}  {listed}"
            )
        ours, theirs = medians["ringleader"], medians["by hand"]
        if ours and theirs:
            print(f"{distribution:<32}ringleader / by hand steps/s {ours / theirs:.3f}")
        # a round's two runs share the machine's state of the moment (see bench/horovod.py)
        paired = [
            a.steps_per_second / b.steps_per_second
            for a, b in zip(results["ringleader"], results["by hand"], strict=True)
            if a.steps_per_second and b.steps_per_second
        ]
        if paired:
            listed = ", ".join(f"{ratio:.3f}" for ratio in paired)
            print(f"{'':<32}per round: {listed}; median {statistics.median(paired):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
