"""Schemathesis hooks for scripts/api-fuzz.sh (SCHEMATHESIS_HOOKS).

Two rules that OpenAPI cannot state, so that every schema-valid request is
one the service must accept:

- A key sent both as the `Idempotency-Key` header and as the body's
  `idempotency_key` must be the same key (a 400 otherwise): cases that send
  both keep the body's key only.
- A key used again with another task type or input is a 422 conflict: valid
  keys are made unique per case (the conflict has its own tests).
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
        key = case.body.get("idempotency_key")
        if isinstance(key, str) and VALID_BODY_KEY.match(key):
            case.body["idempotency_key"] = f"{key[:200]}-{uuid.uuid4()}"
    return case
