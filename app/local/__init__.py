"""The production topology on one machine: what ``infra/`` and the AMI run, on loopback."""
