"""Benchmarks run by ``holon bench NAME --json``. Each measures its physical baseline in the same run."""
