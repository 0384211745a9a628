"""The cluster as the service sees it: node snapshots and pods folded into `NodeState`s (`state`), pod manifests
read into requests (`pods`), and the Kubernetes watch that keeps pods, nodes and the pending queue current (`kube`,
the only module here that talks to the Kubernetes API). Below the API layer, above `advisor.placement`.
"""
