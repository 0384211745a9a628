"""Node agent: reads GPUs and GPU processes through NVML, attributes them to pods, exports metrics and snapshots."""
