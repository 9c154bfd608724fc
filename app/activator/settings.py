"""The activator's configuration, from the environment (docs/scale-to-zero.md#the-activator)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class ActivatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MODELDEPLOYMENT_ACTIVATOR_", extra="ignore")

    host: str = "0.0.0.0"  # noqa: S104 - a proxy in a Pod listens on the Pod's address
    port: int = Field(default=8080, ge=1, le=65535)
    metrics_port: int = Field(default=9090, ge=1, le=65535)
    # Requests held per deployment; one more is answered 503 with Retry-After at once.
    max_held: int = Field(default=1000, ge=1)
    # The longest hold, whatever a scaler's wakeTimeout says: the Pod's termination grace period is
    # longer than this, so a rolling restart never cuts a hold short.
    max_hold_seconds: float = Field(default=900.0, gt=0)
    # A held request's body is read whole before it is held (it is replayed upstream).
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1)
    # How often the wake request is written again while requests are held (the park decision counts
    # it, so a held request keeps its deployment from parking).
    wake_interval_seconds: float = Field(default=10.0, gt=0)
    # How often a deployment being woken is read (one reader per deployment, never per request).
    poll_seconds: float = Field(default=1.0, gt=0)
    # Held requests forwarded at once when the first replica turns Ready; the rest follow as these
    # receive their first byte (a gradual release).
    release_batch: int = Field(default=8, ge=1)
    # Retry-After of an overflow 503 and of one with no better estimate.
    retry_after_seconds: int = Field(default=30, ge=1)
    # A forwarded request's read timeout upstream (a long generation streams within it).
    upstream_timeout_seconds: float = Field(default=600.0, gt=0)
