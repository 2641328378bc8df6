"""The sections of ``benchmarks/run.py``, one module each, over ``config``'s sizes and ``_s3env.Env``."""
