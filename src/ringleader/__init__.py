"""ringleader: a multi-host MPI training entry point for SageMaker-style Docker images."""

__version__ = "0.1.0"
