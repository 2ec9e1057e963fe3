"""`ringleader local`: a job on N fake hosts, one container each, on a private Docker network."""
