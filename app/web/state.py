"""What the handlers share: settings, the executor and the world sources (built in the lifespan)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.control.scaler import ScalerSettings
from app.control.sync import SyncSettings
from app.kube.client import Kube
from app.kube.executor import Executor
from app.kube.scaler_executor import ScalerExecutor
from app.settings import Settings
from app.world import DirectoryWorld


@dataclass
class ServiceState:
    settings: Settings
    sync_settings: SyncSettings
    executor: Executor
    kube: Kube | None
    directory_world: DirectoryWorld | None
    scaler_settings: ScalerSettings = field(default_factory=ScalerSettings)
    scaler_executor: ScalerExecutor = field(default_factory=lambda: ScalerExecutor(None))
