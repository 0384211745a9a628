"""The per-app context that request handlers reach through `deps`."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from advisor.api.metrics import AdvisorMetrics
from advisor.predictors import Predictors
from advisor.scoring import ScoringConfig
from advisor.settings import AdvisorSettings
from advisor.state import ClusterState


@dataclass
class AppContext:
    """Everything a request handler may need, built once per app by the factory.

    `predictors` is replaced as a whole when a newly promoted model is loaded; handlers read it once per request.
    """

    settings: AdvisorSettings
    engine: Engine
    sessions: sessionmaker[Session]
    state: ClusterState = field(default_factory=ClusterState)
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    predictors: Predictors = field(default_factory=Predictors.heuristic)
    metrics: AdvisorMetrics = field(default_factory=AdvisorMetrics)
