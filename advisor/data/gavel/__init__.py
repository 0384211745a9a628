"""Gavel's measured throughputs and job traces (MIT, stanford-futuredata/gavel; LICENSE beside this file).

`gpuadvisor up` trains its first models from these when the store has none.
"""
