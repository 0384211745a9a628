"""The per-app context that request handlers reach through `deps`."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from advisor.api.answer_caches import AnswerCaches
from advisor.api.metrics import AdvisorMetrics
from advisor.api.score_delta import ScoreDeltas
from advisor.cluster.dra import DraIndex
from advisor.cluster.state import ClusterState
from advisor.placement.config import ScoringConfig
from advisor.placement.scorer import Scorer
from advisor.predictors import Predictors
from advisor.serving import ServedModels, TrainingJobs
from advisor.settings import AdvisorSettings


@dataclass
class AppContext:
    """Everything a request handler may need, built once per app by the factory.

    `predictors` is replaced as a whole when a newly promoted model is loaded (`models`); handlers read it once per
    request. `scorer` holds the scoring path's caches for the predictors served now; `caches` the hot routes'
    written answers and checked Node objects, which do not depend on the predictors; `deltas` the tables of
    `/v1/score`'s delta answers (`since`).
    """

    settings: AdvisorSettings
    engine: Engine
    sessions: sessionmaker[Session]
    state: ClusterState = field(default_factory=ClusterState)
    dra: DraIndex = field(default_factory=DraIndex)
    scoring: ScoringConfig = field(default_factory=ScoringConfig)
    metrics: AdvisorMetrics = field(default_factory=AdvisorMetrics)
    caches: AnswerCaches = field(default_factory=AnswerCaches)
    deltas: ScoreDeltas = field(default_factory=ScoreDeltas)
    models: ServedModels = field(init=False)
    training: TrainingJobs = field(init=False)
    _scorer: Scorer | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.models = ServedModels(self.sessions)
        self.training = TrainingJobs(self.sessions, self.settings.model_dir, on_done=self.models.refresh)

    @property
    def predictors(self) -> Predictors:
        return self.models.predictors

    @property
    def scorer(self) -> Scorer:
        """The scorer of the configuration and the models served now; a new one (its caches cold) once newly promoted
        models are loaded, since every cached verdict depends on the predictors."""
        predictors = self.models.predictors
        scorer = self._scorer
        if scorer is None or scorer.predictors is not predictors:
            scorer = self._scorer = Scorer(
                self.scoring, predictors, clock=self.state.now, pending_mig=self.state.pending_mig_profiles
            )
        return scorer

    def reload_predictors(self) -> None:
        """Serve the currently promoted models (heuristics where none): at start-up and after `gpuadvisor up` trains."""
        self.models.load()
