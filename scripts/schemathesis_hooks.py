"""Schemathesis hooks for scripts/api-fuzz.sh (SCHEMATHESIS_HOOKS).

Two rules that OpenAPI cannot state, so that every schema-valid request is
one the service must accept:

- A key sent both as the `Idempotency-Key` header and as the body's
  `idempotency_key` must be the same key (a 400 otherwise): cases that send
  both keep the body's key only.
- A key used again with another task type or input is a 422 conflict: valid
  keys are made unique per case (the conflict has its own tests), in a
  batch's items too.
- `POST /tasks/batch` answers an item that breaks its schema with that item's
  400 inside a 200 (every item is submitted as if alone): a negative case
  whose envelope is valid (an object with only `tasks`, a list of 1 to 100
  items) is no batch to reject, so its `negative_data_rejection` failure is
  dropped. Every other check still runs on it, and a malformed envelope must
  still be rejected.
"""

import re
import uuid

import schemathesis

VALID_BODY_KEY = re.compile(r"^[^\u0000-\u001F\u007F-\u009F]{1,255}$")
VALID_HEADER_KEY = re.compile(r'^("([ !#-\[\]-~]|\\["\\]){1,255}"|[!#-+\--~]{1,255})$')


@schemathesis.hook
def map_case(ctx, case):
    headers = case.headers or {}
    header = next((k for k in headers if k.lower() == "idempotency-key"), None)
    if header is not None and isinstance(case.body, dict) and case.body.get("idempotency_key") is not None:
        del headers[header]
        header = None
    if header is not None and isinstance(headers[header], str) and VALID_HEADER_KEY.match(headers[header]):
        headers[header] = f"k-{uuid.uuid4()}"
    if isinstance(case.body, dict):
        unique_key(case.body)
        for item in case.body.get("tasks") or [] if isinstance(case.body.get("tasks"), list) else []:
            if isinstance(item, dict):
                unique_key(item)
    return case


def unique_key(body):
    key = body.get("idempotency_key")
    if isinstance(key, str) and VALID_BODY_KEY.match(key):
        body["idempotency_key"] = f"{key[:200]}-{uuid.uuid4()}"


def valid_batch_envelope(body):
    return (
        isinstance(body, dict)
        and set(body) == {"tasks"}
        and isinstance(body["tasks"], list)
        and 1 <= len(body["tasks"]) <= 100
    )


@schemathesis.hook
def filter_failure(ctx, failure, case, response):
    if (
        "negative_data_rejection" in getattr(failure, "checks", ())
        and case.path == "/tasks/batch"
        and response.status_code == 200
        and valid_batch_envelope(case.body)
    ):
        return False
    return True
