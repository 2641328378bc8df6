"""The sections of ``benchmarks/frameworks.py``: a module per framework's turn (a ``Harness``), how a
session is grown and measured (``turns``), and the tables (``sections``)."""
