"""The sections of ``benchmarks/scale.py``, one module each, over ``setup``'s sizes and sessions."""
