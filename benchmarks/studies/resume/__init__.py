"""The pieces of ``benchmarks/resume.py``: its plan, the evstore source it measures, Strands' sessions, the
resuming child, the bench (setup, resumes, appends) and the report. Nothing here imports evstore on import:
the script chooses which evstore to measure first (``source``)."""
