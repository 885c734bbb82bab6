"""Keeps a fleet gateway's pool in step with the platform's serving replicas, over the gateway's admin API.

Each autoscaler pass tells the registrar which replicas answer (their endpoints); it lists the gateway's
replicas of the pool, adds the ones missing (`POST /v1/fleet/pools/{pool}/workers`) and removes the ones the
platform no longer runs (`DELETE .../workers/{name}`). Only workers it named (`platform-<pool>-...`) are touched,
so workers an operator configured stay. A replica leaving on scale-down is removed before its job is
cancelled, so the gateway stops sending it requests first. A gateway that does not answer is retried on the
next pass; nothing here blocks scaling.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GatewayTarget:
    """`switchyard cluster start --gateway URL --gateway-api-key KEY`."""

    url: str
    """The gateway's base URL, without /v1."""
    api_key: str
    """The gateway's operators' key (its admin API refuses pool changes without one)."""
    timeout_s: float = 5.0


def worker_name(pool: str, job_id: str, index: int) -> str:
    return f"platform-{pool}-{job_id}-{index}"


class GatewayRegistrar:
    def __init__(self, target: GatewayTarget, http: httpx.Client | None = None) -> None:
        self.target = target
        self._http = http or httpx.Client(
            base_url=target.url.rstrip("/"),
            timeout=target.timeout_s,
            headers={"authorization": f"Bearer {target.api_key}"},
        )

    def sync(self, platform_pool: str, gateway_pool: str, endpoints: Mapping[str, str]) -> None:
        """Make the gateway pool's platform workers exactly `endpoints` (worker name -> base URL)."""
        prefix = f"platform-{platform_pool}-"
        try:
            rows = self._http.get("/v1/fleet/replicas").raise_for_status().json()["data"]
            registered = {
                row["name"]: row["url"]
                for row in rows
                if row["pool"] == gateway_pool and row["name"].startswith(prefix)
            }
            for name in registered.keys() - endpoints.keys():
                self._http.delete(f"/v1/fleet/pools/{gateway_pool}/workers/{name}").raise_for_status()
                logger.info("gateway pool %s: removed %s", gateway_pool, name)
            for name in endpoints.keys() - registered.keys():
                body = {"url": endpoints[name], "name": name}
                self._http.post(f"/v1/fleet/pools/{gateway_pool}/workers", json=body).raise_for_status()
                logger.info("gateway pool %s: added %s (%s)", gateway_pool, name, endpoints[name])
        except (httpx.HTTPError, KeyError, ValueError) as error:
            logger.warning(
                "gateway pool %s: could not sync its workers (%s); retried next pass", gateway_pool, error
            )

    def close(self) -> None:
        self._http.close()
