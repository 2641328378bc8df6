"""The benchmarks' studies: a package per script (``run``, ``scale``, ``resume``, ``frameworks``), a module per section."""
