# The one image of every gpuadvisor component (collector DaemonSet, advisor, profiler): `gpuadvisor <command>`.
# Build: docker build -t REGISTRY/gpuadvisor:0.1.0 .   (deploy/kustomization.yaml names this image; docs/install.md)
# Stage 1 builds a self-contained virtualenv; the last stage copies only that venv onto a slim base and runs as a
# non-root user.
#
# The reference-workload image, `gpuadvisor-workloads` (GPUADVISOR_REFERENCE_IMAGE's default: the partners a TrialRun
# without colocateWith is co-run with, docs/profiler.md), is the `workloads` stage, built only when asked for:
#   docker build --target workloads -t REGISTRY/gpuadvisor-workloads:0.1.0 .

FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/gpuadvisor
WORKDIR /src
# dependencies first, so source edits do not reinstall them
COPY pyproject.toml README.md ./
RUN mkdir collector profiler advisor \
    && touch collector/__init__.py profiler/__init__.py advisor/__init__.py \
    && /opt/gpuadvisor/bin/pip install . \
    && /opt/gpuadvisor/bin/pip uninstall -y gpuadvisor
COPY collector ./collector
COPY profiler ./profiler
COPY advisor ./advisor
RUN /opt/gpuadvisor/bin/pip install --no-deps . \
    && /opt/gpuadvisor/bin/gpuadvisor --help >/dev/null

FROM python:3.11-slim AS workloads
# PyTorch (the `workloads` extra; its Linux wheels bring the CUDA runtime) and the reference training loops,
# `python -m profiler.workloads NAME`; the GPU driver comes from the node through the NVIDIA container runtime.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY collector ./collector
COPY profiler ./profiler
COPY advisor ./advisor
RUN pip install '.[workloads]' \
    && python -c "import torch, profiler.workloads.train" \
    && rm -rf /src \
    && groupadd --gid 65532 gpuadvisor \
    && useradd --uid 65532 --gid 65532 --create-home --shell /usr/sbin/nologin gpuadvisor
WORKDIR /home/gpuadvisor
USER 65532:65532
CMD ["python", "-m", "profiler.workloads", "--help"]

FROM python:3.11-slim
# libgomp1: LightGBM's OpenMP runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 65532 gpuadvisor \
    && useradd --uid 65532 --gid 65532 --home-dir /var/lib/gpuadvisor --create-home --shell /usr/sbin/nologin gpuadvisor
COPY --from=build /opt/gpuadvisor /opt/gpuadvisor
ENV PATH=/opt/gpuadvisor/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GPUADVISOR_MODEL_DIR=/var/lib/gpuadvisor/models
WORKDIR /var/lib/gpuadvisor
USER 65532:65532
# advisor API, collector /metrics
EXPOSE 8080 9400
ENTRYPOINT ["gpuadvisor"]
CMD ["--help"]
