"""Tests of infra/: configuration and synthesized stacks."""
