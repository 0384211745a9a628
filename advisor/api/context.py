"""The per-app context that request handlers reach through `deps`."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from advisor.settings import AdvisorSettings


@dataclass
class AppContext:
    """Everything a request handler may need, built once per app by the factory."""

    settings: AdvisorSettings
    engine: Engine
    sessions: sessionmaker[Session]
