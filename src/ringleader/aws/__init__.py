"""Talking to AWS, the same way everywhere (source, artifacts, the stack command).

- `uri`: s3://bucket/key parsing and S3's bucket-name rules (pure).
- `redact`: credential values that must never be shown, and masking them (pure).
- `errors`: what an AWS error means: worth another attempt, how long to wait, how it reads
  (imports botocore).
- `client`: the one client factory: botocore configuration (standard retry mode, timeouts),
  endpoint and session (imports boto3, which is slow: import this module only when a client
  is needed).

Imports only ringleader.core, botocore and boto3; nothing in this package imports it back.
"""
