"""Helper scripts the tests run in subprocesses (and import for their shared pieces)."""
