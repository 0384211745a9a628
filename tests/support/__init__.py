"""Helpers shared by the test packages: real external binaries, servers and free ports."""
