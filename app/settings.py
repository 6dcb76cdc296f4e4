"""Service settings, read from ``GDPFED_*`` environment variables (docs/service.md §Settings).

``Settings()`` reads the environment when it is constructed, never at import time, so
tests build their own ``Settings(database_url=...)`` and two apps can live in one process.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.compute import default_workers

LogLevel = Literal["debug", "info", "warning", "error", "critical"]


class Settings(BaseSettings):
    """Everything the service reads from its environment (prefix ``GDPFED_``)."""

    model_config = SettingsConfigDict(env_prefix="GDPFED_", extra="ignore")

    database_url: str = Field(
        "sqlite:///./gdpfed.db",
        description="SQLAlchemy URL; the default is a SQLite file in the working directory",
    )
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    log_level: LogLevel = "info"
    compute_timeout_seconds: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="wall-clock limit of one accounting or planning computation; "
        "past it the request answers 503 {code: timeout}",
    )
    compute_workers: int = Field(
        default_factory=default_workers, ge=1, le=256,
        description="worker processes that run accounting and planning (default: one per core)",
    )
    workers: int = Field(
        1, ge=1, le=64,
        description="server processes (uvicorn workers) sharing the port; the database is their only shared state",
    )
    initial_key: Literal["create", "none"] = Field(
        "create",
        description="with no API key in the database at start: 'create' makes an operator "
        "key and prints it once; 'none' starts without one (use --create-key)",
    )
    initial_api_key: SecretStr | None = Field(
        None,
        description="use this token (>= 32 characters) for the initial operator key "
        "instead of a random one (for deployments that inject a secret)",
    )
    metrics_require_key: bool = Field(
        False, description="require an API key (any role) for GET /metrics"
    )
    max_groups: int = Field(
        1000, ge=1, le=200_000, description="most groups one scenario or population may have"
    )
    max_request_bytes: int = Field(
        1_000_000, ge=1024, description="larger request bodies are refused with 413"
    )
    db_busy_timeout_seconds: float = Field(
        30.0, gt=0, description="SQLite: how long a writer waits for the lock before failing"
    )

    @field_validator("initial_api_key")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 32:
            raise ValueError("must be at least 32 characters (use a random token)")
        return value
