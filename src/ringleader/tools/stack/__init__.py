"""`ringleader stack`: the private training VPC of cfn/training-vpc.yaml, created with boto3.

Data flows one way: command-line options -> params (pure validation into frozen dataclasses)
-> template (the YAML file, checked against those values) -> client (boto3 CloudFormation calls
with bounded waiters) -> events / render (pure: the failing resource's events, the outputs as
estimator arguments) -> cli (printing and exit codes).
"""
