#!/bin/sh
# Exec-form ENTRYPOINT target. SageMaker runs `docker run IMAGE train`; the Python entry point
# accepts (and ignores) that leading `train`. exec keeps signals going straight to Python.
exec /opt/ringleader/venv/bin/python -m ringleader.supervise.entrypoint "$@"
