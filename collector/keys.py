"""The Kubernetes label, annotation and resource names that the three components read and write: one home for each
wire contract (docs/design.md §3–§5).

The collector writes the GPU-use annotations and reads the workload label; the profiler labels its trial pods and
reads the annotations back from pods it records; the advisor reads a pod's requests, workload and gang. The collector
is the lowest layer, so every component imports these from here and none re-declares them.
"""

from __future__ import annotations

# Annotations the collector writes on pods that use a GPU (collector.annotations), read by the profiler.
MEMORY_ANNOTATION = "gpuadvisor.io/gpu-memory-used-bytes"
UTILIZATION_ANNOTATION = "gpuadvisor.io/gpu-utilization"
GPUS_ANNOTATION = "gpuadvisor.io/gpus"
UPDATED_AT_ANNOTATION = "gpuadvisor.io/updated-at"
JOB_ANNOTATION = "gpuadvisor.io/job"
# Annotations the collector writes on its node: the GPUs' link topology, and how each GPU is shared (its UUID to
# its snapshot's `sharing`; read by the profiler when it records a co-location).
TOPOLOGY_ANNOTATION = "gpuadvisor.io/gpu-topology"
SHARING_ANNOTATION = "gpuadvisor.io/gpu-sharing"

# Annotations a pod sets to ask for a share of one GPU (read by the advisor).
GPU_MILLI_ANNOTATION = "gpuadvisor.io/gpu-milli"
GPU_MEMORY_ANNOTATION = "gpuadvisor.io/gpu-memory-bytes"

# Labels: the workload identity every component keys on, and the profiler's own on trial pods and recorded jobs.
WORKLOAD_LABEL = "gpuadvisor.io/workload"
USER_LABEL = "gpuadvisor.io/user"
TRIALRUN_LABEL = "gpuadvisor.io/trialrun"
TRIAL_LABEL = "gpuadvisor.io/trial"
SIDE_LABEL = "gpuadvisor.io/side"

# Pod groups (gangs), in the order they are looked for: the scheduler-plugins coscheduling label, then Volcano's.
GANG_KEYS = ("scheduling.x-k8s.io/pod-group", "volcano.sh/job-name")

# NVIDIA's device plugin and GPU feature discovery.
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_PRESENT_LABEL = "nvidia.com/gpu.present"
GPU_COUNT_LABEL = "nvidia.com/gpu.count"
