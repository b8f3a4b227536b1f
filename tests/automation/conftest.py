"""The fixtures of the driver's tests that several of its folders use."""

from _aws_run import aws  # noqa: F401 - moto's AWS with the stack's GPU node group, for the AWS-run tests
