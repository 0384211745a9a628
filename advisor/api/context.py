"""The per-app context that request handlers reach through `deps`."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from advisor.api.metrics import AdvisorMetrics
from advisor.cluster.dra import DraIndex
from advisor.cluster.state import ClusterState
from advisor.placement.config import ScoringConfig
from advisor.predictors import Predictors
from advisor.serving import ServedModels, TrainingJobs
from advisor.settings import AdvisorSettings


@dataclass
class AppContext:
    """Everything a request handler may need, built once per app by the factory.

    `predictors` is replaced as a whole when a newly promoted model is loaded (`models`); handlers read it once per
    request.
    """

    settings: AdvisorSettings
    engine: Engine
    sessions: sessionmaker[Session]
    state: ClusterState = field(default_factory=ClusterState)
    dra: DraIndex = field(default_factory=DraIndex)
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    metrics: AdvisorMetrics = field(default_factory=AdvisorMetrics)
    models: ServedModels = field(init=False)
    training: TrainingJobs = field(init=False)

    def __post_init__(self) -> None:
        self.models = ServedModels(self.sessions)
        self.training = TrainingJobs(self.sessions, self.settings.model_dir, on_done=self.models.refresh)

    @property
    def predictors(self) -> Predictors:
        return self.models.predictors

    def reload_predictors(self) -> None:
        """Serve the currently promoted models (heuristics where none): at start-up and after `gpuadvisor up` trains."""
        self.models.load()
