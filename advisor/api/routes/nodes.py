"""The cluster state as the advisor sees it, with each node's staleness."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, status

from advisor.api.deps import Ctx
from advisor.api.errors import ERROR_RESPONSES, StrictJsonRoute, documented
from advisor.api.schemas import GpuOut, MigInstanceOut, NodeListOut, NodeOut, ResidentOut
from advisor.cluster.state import NodeRecord

router = APIRouter(prefix="/v1/nodes", tags=["nodes"], route_class=StrictJsonRoute, responses=ERROR_RESPONSES)


def _node_out(
    record: NodeRecord, now: float, staleness_seconds: float, *, detail: bool, labels: Mapping[str, str] | None
) -> NodeOut:
    node = record.state
    age = max(0.0, now - record.received_at_seconds)
    gpus = [
        GpuOut(
            index=g.index,
            model=g.model,
            healthy=g.healthy,
            memory_total_bytes=g.memory_total_bytes,
            memory_used_bytes=g.memory_used_bytes,
            utilization_ratio=g.sm_utilization_ratio,
            memory_bandwidth_utilization_ratio=g.memory_bandwidth_utilization_ratio,
            allocated_milli=g.allocated_milli,
            residents=[
                ResidentOut(
                    pod=r.pod,
                    workload=r.workload,
                    gpu_milli=r.gpu_milli,
                    sm_utilization_ratio=r.sm_utilization_ratio,
                    memory_bandwidth_utilization_ratio=r.memory_bandwidth_utilization_ratio,
                    memory_used_bytes=r.memory_used_bytes,
                )
                for r in g.residents
            ],
        )
        for g in node.gpus
    ]
    # `gpus` left unset, not None, without detail: the list answer leaves out unset fields only, so a resident's
    # required-but-unknown `workload` is still there, as null (its schema).
    more: dict[str, object] = {"gpus": gpus} if detail else {}
    if detail:
        more["mig_instances"] = [
            MigInstanceOut(gpu=i.gpu, profile=i.profile, taken=i.taken) for i in node.mig_instances
        ]
    if detail and labels is not None:
        more["labels"] = dict(labels)
    return NodeOut(
        name=node.name,
        stale=age > staleness_seconds,
        age_seconds=round(age, 3),
        snapshot_timestamp=record.timestamp.isoformat(),
        gpu_model=node.gpu_model,
        gpu_count=len(node.gpus),
        free_gpus=node.free_gpus,
        topology_known=node.topology.known,
        gangs=sorted(node.gangs),
        **more,
    )


@router.get("", response_model=NodeListOut, response_model_exclude_unset=True)
def list_nodes(
    ctx: Ctx, detail: Annotated[bool, Query(description="Include every GPU and its residents.")] = False
) -> NodeListOut:
    """Every node that has sent telemetry, by name."""
    now = ctx.state.now()
    limit = ctx.scoring.staleness_seconds
    records = ctx.state.records()
    return NodeListOut(
        nodes=[
            _node_out(r, now, limit, detail=detail, labels=ctx.state.node_labels(r.state.name) if detail else None)
            for r in records
        ],
        staleness_seconds=limit,
    )


@router.get("/{name}", response_model=NodeOut, responses=documented(404))
def get_node(name: str, ctx: Ctx) -> NodeOut:
    """One node with its GPUs, residents and allocations."""
    record = ctx.state.record(name)
    if record is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"name: no telemetry has been received from node {name!r}")
    return _node_out(
        record, ctx.state.now(), ctx.scoring.staleness_seconds, detail=True, labels=ctx.state.node_labels(name)
    )
