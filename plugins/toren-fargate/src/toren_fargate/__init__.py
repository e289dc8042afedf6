"""Toren's worker runtime for AWS Fargate (``TOREN_RUNTIME=fargate``) and Secrets Manager."""
