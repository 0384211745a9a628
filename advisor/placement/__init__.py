"""Placement: where a GPU pod should go, as pure functions over plain values (no HTTP, no Kubernetes, no SQL).

`types` (pod request, node state, verdict) and `config`; `scoring` (per-node verdicts, with `gpuset` and
`fragmentation`); `extender` (kube-scheduler's integers); the filter's rules — `holding`, `shortest`, `waiting` —
composed once in `filter`, which the service (`advisor.api.routes.extender`) and the simulator (`advisor.sim`) both
call; `queue` (pending pods as those rules read them); `unresolvable` (nodes that can never host a pod) and
`devices` (device IDs for a device plugin's GetPreferredAllocation). See docs/architecture.md.
"""
