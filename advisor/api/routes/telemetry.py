"""NodeSnapshot ingest from the collectors (bearer token). Kept cheap: validate, rebuild one node, answer."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, status

from advisor.api.deps import Authorized, Ctx
from advisor.api.schemas import TelemetryAccepted
from collector.snapshot import NodeSnapshot

router = APIRouter(prefix="/v1", tags=["telemetry"])

# Far above any real node (16 GPUs today); bounds the per-node topology and GPU-set search a snapshot can ask for.
MAX_GPUS_PER_NODE = 64


@router.post(
    "/telemetry",
    response_model=TelemetryAccepted,
    status_code=status.HTTP_202_ACCEPTED,
    dependencies=[Authorized],
)
async def telemetry(snapshot: NodeSnapshot, ctx: Ctx) -> TelemetryAccepted:
    """Take one node's snapshot; an older snapshot than the one held (by its timestamp) is dropped, not an error.

    `async` on purpose: rebuilding one node takes a fraction of a millisecond without I/O, less than a thread hop.
    """
    if len(snapshot.gpus) > MAX_GPUS_PER_NODE:
        raise HTTPException(
            status.HTTP_422_UNPROCESSABLE_CONTENT,
            f"gpus: {len(snapshot.gpus)} GPUs in one snapshot; at most {MAX_GPUS_PER_NODE} per node are accepted",
        )
    accepted = ctx.state.ingest(snapshot)
    ctx.metrics.snapshots.labels("accepted" if accepted else "out_of_order").inc()
    return TelemetryAccepted(
        node=snapshot.node,
        accepted=accepted,
        reason="" if accepted else "older than the snapshot already held for this node",
    )
