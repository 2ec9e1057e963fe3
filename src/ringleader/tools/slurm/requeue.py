"""A job that ends with the do-not-retry code (exitcodes.DO_NOT_RETRY) is marked so in Slurm:
`scontrol update JobId=ID Requeue=0`, so neither Slurm's own requeue (a node failing before
the batch script ends) nor the script's `scontrol requeue` starts it again."""

import subprocess
from collections.abc import Callable

REQUEUE_TIMEOUT = 10.0  # seconds scontrol may take on a busy controller

Run = Callable[..., "subprocess.CompletedProcess[str]"]


def forbid_requeue(job_id: str, run: Run = subprocess.run) -> str:
    """Mark the job not requeueable; the line to say (what was done, or why it failed: the
    job's exit code stands either way)."""
    argv = ["scontrol", "update", f"JobId={job_id}", "Requeue=0"]
    problem = ""
    try:
        done = run(argv, capture_output=True, text=True, timeout=REQUEUE_TIMEOUT, check=False)
        if done.returncode != 0:
            problem = (done.stderr or done.stdout).strip() or f"exit code {done.returncode}"
    except (OSError, subprocess.SubprocessError) as error:
        problem = str(error) or type(error).__name__
    if problem:
        return f"could not mark job {job_id} not requeueable ({' '.join(argv)}): {problem}"
    return f"restarting cannot help: job {job_id} marked not requeueable ({' '.join(argv)})"
