"""Helpers shared by the test modules (importable as ``helpers``: pytest puts ``tests/`` on sys.path)."""
