"""The ``holon`` command line. Heavy modules are imported inside commands, so ``--help`` is fast."""
