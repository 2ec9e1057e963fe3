"""Fixed locations inside the container."""

from pathlib import Path

RUN_DIR = Path("/run/ringleader")
AGENT_SOCKET = RUN_DIR / "agent.sock"  # rank wrappers on this host talk to the host's agent
HOST_ENV_FILE = RUN_DIR / "host-env.json"  # this host's environment for its ranks (mode 0600)
SSHD_NOTIFY_SOCKET = RUN_DIR / "sshd-notify.sock"
RANK_ERROR_DIR = RUN_DIR / "errors"  # TORCHELASTIC_ERROR_FILE of each spawned rank

OUTPUT_DIR = Path("/opt/ml/output")
FAILURE_FILE = OUTPUT_DIR / "failure"
SUCCESS_FILE = OUTPUT_DIR / "success"
DATA_DIR = OUTPUT_DIR / "data"  # what SageMaker uploads
LOG_DIR = DATA_DIR / "logs"  # per-rank logs: logs/<host>/rank-<N>.log
METRICS_FILE = DATA_DIR / "metrics.jsonl"
JOB_FILE = DATA_DIR / "job.json"  # the leader's summary: outcome and every rank's record
