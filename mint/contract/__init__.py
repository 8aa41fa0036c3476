"""Contracts: the harness, the suites and the gates that define "better" for one specialist."""
