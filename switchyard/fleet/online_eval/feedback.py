"""`POST /v1/feedback`: a rating, a correction or a comment tied to a logged request.

The rating is a number in [-1, 1] (-1 bad, 0 neutral, 1 good; thumbs are -1 and 1). A tenant's key may rate
only its own requests: another tenant's id answers 404 as an unknown one does, so ids do not leak.
"""

from __future__ import annotations

import json
from typing import Any

from switchyard.fleet.errors import BadRequestError, UnknownRequestError
from switchyard.fleet.online_eval.log import Feedback
from switchyard.fleet.online_eval.recorder import OnlineEvalRecorder
from switchyard.json_text import lone_surrogate_path


def parse_feedback(raw: bytes, tenant: str, created: float) -> Feedback:
    """The feedback a request body gives, for `tenant` (the caller's); BadRequestError saying what is wrong."""
    try:
        body: Any = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequestError("The body must be a JSON object.") from exc
    if not isinstance(body, dict):
        raise BadRequestError("The body must be a JSON object.")
    bad = lone_surrogate_path(body)  # SQLite could not store it
    if bad is not None:
        raise BadRequestError(f"`{bad}` holds a lone UTF-16 surrogate, which is not valid text.", param=bad)
    request_id = body.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        raise BadRequestError("`request_id` must be the id of a logged request.", param="request_id")
    rating = body.get("rating")
    if rating is not None and (
        isinstance(rating, bool) or not isinstance(rating, int | float) or not -1 <= rating <= 1
    ):
        raise BadRequestError("`rating` must be a number from -1 (bad) to 1 (good).", param="rating")
    texts = {name: body.get(name) for name in ("correction", "comment")}
    for name, value in texts.items():
        if value is not None and not isinstance(value, str):
            raise BadRequestError(f"`{name}` must be a string.", param=name)
    if rating is None and texts["correction"] is None and texts["comment"] is None:
        raise BadRequestError("Give a `rating`, a `correction` or a `comment`.")
    return Feedback(
        request_id,
        tenant,
        None if rating is None else float(rating),
        texts["correction"],
        texts["comment"],
        created,
    )


async def record_feedback(recorder: OnlineEvalRecorder, feedback: Feedback, tenancy: bool) -> None:
    """Store `feedback` if its request is logged (and, with tenancy, is the tenant's); else UnknownRequestError."""
    await recorder.writer.flush()  # a request answered a moment ago may still be on the writer's queue
    owner = recorder.log.owner(feedback.request_id)
    if owner is None or (tenancy and owner[0] != feedback.tenant):
        raise UnknownRequestError(feedback.request_id)
    recorder.log.add_feedback(feedback)
    if recorder.metrics is not None:
        recorder.metrics.observe_feedback(owner[1], feedback.rating)
