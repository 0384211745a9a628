"""Trial-run profiling and job history; owns the SQL store that the advisor trains from.

Workloads import `report` from here to speak the progress protocol: `profiler.report(step=..., samples=...)`.
"""

from profiler.progress import report

__all__ = ["report"]
