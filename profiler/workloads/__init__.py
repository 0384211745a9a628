"""Reference trial workloads: small training loops on synthetic data that speak the progress protocol.

Four model families with different GPU appetites (a CNN, a Transformer encoder, an LSTM, an embedding-heavy
recommender) for trying the profiler and for interference analyses. They need PyTorch, the optional extra
`workloads` (`pip install 'gpuadvisor[workloads]'`); nothing else in gpuadvisor imports this package. Run one with
`python -m profiler.workloads cnn --steps 200 --batch-size 64`.
"""

from __future__ import annotations

WORKLOADS = ("cnn", "transformer", "lstm", "recommender")
