"""The control plane's HTTP API (FastAPI, on loopback by default): jobs, quotas, nodes, and injected faults.

    POST   /v1/cluster/jobs                  a job spec (JSON, see job_codec) -> 201 and the job
    GET    /v1/cluster/jobs[/{id}]           the jobs, or one
    DELETE /v1/cluster/jobs/{id}             cancel (a running job gets its checkpoint signal first)
    GET    /v1/cluster/quotas                PUT /v1/cluster/quotas/{team} {guaranteed_gpus, weight, can_borrow}
    GET    /v1/cluster/nodes                 POST /v1/cluster/nodes/{id}/{cordon,uncordon,drain}
    GET    /v1/cluster/repairs               GPUs out of service (cordoned, repair, burn-in), longest out first
    POST   /v1/cluster/nodes/{id}/faults     {gpu, reason} inject a GPU fault (CPU clusters, tests, drills)
    DELETE /v1/cluster/nodes/{id}/faults/{gpu}   clear it (the "repair"): the GPU then burns in and returns

Errors are the OpenAI error shape with a status per typed error (400 bad spec or unknown team, 404 unknown job
or node, 409 a job that already ended), never a stack trace.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from switchyard.openai_error import ErrorInfo
from switchyard.platform.control_plane import ControlPlane, NodeStatus
from switchyard.platform.errors import (
    JobFinishedError,
    JobNotFoundError,
    JobSpecError,
    NodeNotFoundError,
    PlatformError,
)
from switchyard.platform.gpu_probes import set_injected_fault
from switchyard.platform.job_codec import placement_to_list, spec_from_dict, spec_to_dict
from switchyard.platform.job_store import JobRecord
from switchyard.platform.policy import TeamQuota

Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


class QuotaBody(BaseModel):
    guaranteed_gpus: int = Field(ge=0)
    weight: float = Field(default=1.0, gt=0)
    can_borrow: bool = True


class FaultBody(BaseModel):
    gpu: int = Field(ge=0)
    reason: str = "injected fault"


def job_json(record: JobRecord) -> dict[str, Any]:
    job = record.job
    return {
        "id": job.id,
        "spec": spec_to_dict(job.spec),
        "state": job.state.value,
        "submitted_at": job.submitted_at,
        "started_at": job.started_at,
        "finished_at": record.finished_at,
        "placement": None if job.placement is None else placement_to_list(job.placement),
        "preempted_at": job.preempted_at,
        "gpu_seconds": job.gpu_seconds,
        "attempts": record.attempts,
        "message": record.message,
        "endpoints": list(record.endpoints),
    }


def node_json(node: NodeStatus) -> dict[str, Any]:
    data = dataclasses.asdict(node)
    data["gpus"] = [{**gpu, "health": gpu["health"].value} for gpu in data["gpus"]]
    return data


def _error(status: int, message: str, code: str, param: str | None = None) -> JSONResponse:
    info = ErrorInfo(status, "invalid_request_error", message, param=param, code=code)
    return JSONResponse(info.body(), status_code=status)


def build_app(
    control_plane: ControlPlane, fault_file: Path | None = None, lifespan: Lifespan | None = None
) -> FastAPI:
    """`lifespan`: what runs around the server (`cluster start` stops its loop and Ray there)."""
    app = FastAPI(title="switchyard cluster", docs_url=None, redoc_url=None, lifespan=lifespan)

    @app.exception_handler(PlatformError)
    async def platform_error(_: Request, error: PlatformError) -> JSONResponse:
        if isinstance(error, JobSpecError):
            return _error(400, str(error), "invalid_job_spec")
        if isinstance(error, JobNotFoundError | NodeNotFoundError):
            return _error(404, str(error), "not_found")
        if isinstance(error, JobFinishedError):
            return _error(409, str(error), "job_finished")
        return _error(500, str(error), "platform_error")

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, error: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in issue['loc'][1:]) or 'body'}: {issue['msg']}"
            for issue in error.errors()
        )
        return _error(400, problems, "invalid_request")

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/cluster/jobs", status_code=201)
    def submit(body: dict[str, Any]) -> dict[str, Any]:
        return job_json(control_plane.submit(spec_from_dict(body)))

    @app.get("/v1/cluster/jobs")
    def jobs() -> dict[str, Any]:
        return {"jobs": [job_json(record) for record in control_plane.jobs()]}

    @app.get("/v1/cluster/jobs/{job_id}")
    def job(job_id: str) -> dict[str, Any]:
        return job_json(control_plane.job(job_id))

    @app.delete("/v1/cluster/jobs/{job_id}")
    def cancel(job_id: str) -> dict[str, Any]:
        return job_json(control_plane.cancel(job_id))

    @app.get("/v1/cluster/quotas")
    def quotas() -> dict[str, Any]:
        return {"quotas": [dataclasses.asdict(quota) for quota in control_plane.store.quotas().values()]}

    @app.put("/v1/cluster/quotas/{team}")
    def set_quota(team: str, body: QuotaBody) -> dict[str, Any]:
        quota = TeamQuota(team, body.guaranteed_gpus, body.weight, body.can_borrow)
        control_plane.set_quota(quota)
        return dataclasses.asdict(quota)

    @app.get("/v1/cluster/nodes")
    def nodes() -> dict[str, Any]:
        return {"nodes": [node_json(node) for node in control_plane.nodes()]}

    @app.get("/v1/cluster/repairs")
    def repairs() -> dict[str, Any]:
        return {
            "gpus": [
                {
                    "node_id": gpu.node_id,
                    "gpu": gpu.gpu,
                    "health": gpu.health.value,
                    "reason": gpu.reason,
                    "since": gpu.since,
                }
                for gpu in control_plane.repairs()
            ]
        }

    @app.post("/v1/cluster/nodes/{node_id}/cordon")
    def cordon(node_id: str) -> dict[str, Any]:
        control_plane.cordon(node_id)
        return {"node_id": node_id, "cordoned": True}

    @app.post("/v1/cluster/nodes/{node_id}/uncordon")
    def uncordon(node_id: str) -> dict[str, Any]:
        control_plane.uncordon(node_id)
        return {"node_id": node_id, "cordoned": False}

    @app.post("/v1/cluster/nodes/{node_id}/drain")
    def drain(node_id: str) -> dict[str, Any]:
        return {"node_id": node_id, "cordoned": True, "moved_jobs": control_plane.drain(node_id)}

    @app.post("/v1/cluster/nodes/{node_id}/faults")
    def inject_fault(node_id: str, body: FaultBody) -> Any:
        if fault_file is None:
            return _error(400, "this control plane was started without a fault file", "no_fault_file")
        control_plane.check_gpu(node_id, body.gpu)
        set_injected_fault(fault_file, node_id, body.gpu, body.reason)
        return {"node_id": node_id, "gpu": body.gpu, "fault": body.reason}

    @app.delete("/v1/cluster/nodes/{node_id}/faults/{gpu}")
    def clear_fault(node_id: str, gpu: int) -> Any:
        if fault_file is None:
            return _error(400, "this control plane was started without a fault file", "no_fault_file")
        control_plane.check_gpu(node_id, gpu)
        set_injected_fault(fault_file, node_id, gpu, None)
        return {"node_id": node_id, "gpu": gpu, "fault": None}

    return app
