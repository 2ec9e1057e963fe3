"""Where a host keeps its files: fixed locations in a container, a per-job directory elsewhere.

In a container everything is where SageMaker puts it. On a plain cluster (`ringleader cluster`)
each host's agent points these at the job's own directory through the environment before any of
ringleader runs, and mpirun forwards the same variables to the ranks (RANK_VARIABLES).
"""

import os
import sys
from pathlib import Path

ML_ROOT_VARIABLE = "SAGEMAKER_BASE_DIR"  # sagemaker-training's own name for /opt/ml
RUN_DIR_VARIABLE = "RINGLEADER_RUN_DIR"
RANK_PYTHON_VARIABLE = "RINGLEADER_RANK_PYTHON"  # the interpreter of the per-rank wrapper
# Set on every process of a cluster job, so its host's agent can find and end them all.
JOB_MARK_VARIABLE = "RINGLEADER_CLUSTER_JOB"
# What mpirun passes on to the ranks on other hosts when set (`-x NAME`).
RANK_VARIABLES = (ML_ROOT_VARIABLE, RUN_DIR_VARIABLE, RANK_PYTHON_VARIABLE, JOB_MARK_VARIABLE)

ML_ROOT = Path(os.environ.get(ML_ROOT_VARIABLE) or "/opt/ml")
RUN_DIR = Path(os.environ.get(RUN_DIR_VARIABLE) or "/run/ringleader")
RANK_PYTHON = os.environ.get(RANK_PYTHON_VARIABLE) or sys.executable

AGENT_SOCKET = RUN_DIR / "agent.sock"  # rank wrappers on this host talk to the host's agent
HOST_ENV_FILE = RUN_DIR / "host-env.json"  # this host's environment for its ranks (mode 0600)
SSHD_NOTIFY_SOCKET = RUN_DIR / "sshd-notify.sock"
RANK_ERROR_DIR = RUN_DIR / "errors"  # TORCHELASTIC_ERROR_FILE of each spawned rank
# The heartbeat file of a rank (ringleader.progress() touches it), in the rank's environment.
PROGRESS_FILE_VARIABLE = "RINGLEADER_PROGRESS_FILE"
ATTEMPT_VARIABLE = "RINGLEADER_ATTEMPT"  # 0, then 1, 2, ... after each restart in place
RANKS_DIR = RUN_DIR / "ranks"  # ranks/<N>/: a rank's heartbeat file and faulthandler dumps

CONFIG_DIR = ML_ROOT / "input" / "config"
CODE_DIR = ML_ROOT / "code"
MODEL_DIR = ML_ROOT / "model"
OUTPUT_DIR = ML_ROOT / "output"
FAILURE_FILE = OUTPUT_DIR / "failure"
SUCCESS_FILE = OUTPUT_DIR / "success"
DATA_DIR = OUTPUT_DIR / "data"  # what SageMaker uploads
LOG_DIR = DATA_DIR / "logs"  # per-rank logs: logs/<host>/rank-<N>.log
METRICS_FILE = DATA_DIR / "metrics.jsonl"
HANG_DIR = DATA_DIR / "hang"  # every rank's stacks when the job hung
JOB_FILE = DATA_DIR / "job.json"  # the leader's summary: outcome and every rank's record
