"""Schemathesis hooks for scripts/api-fuzz.sh (SCHEMATHESIS_HOOKS).

Two rules that OpenAPI cannot state, so that every schema-valid request is
one the service must accept:

- A key sent both as the `Idempotency-Key` header and as the body's
  `idempotency_key` must be the same key (a 400 otherwise): cases that send
  both keep the body's key only.
- A key used again with another task type or input is a 422 conflict: valid
  keys are made unique per case (the conflict has its own tests), in a
  batch's items too.
- The task options' rules across fields and clocks (docs/openapi.yaml says
  them in words): `schedule_at` or `delay_seconds`, `ttl_seconds` or
  `expires_at`, an expiry after `available_at`, a schedule within the key's
  life, `payload_ref_threshold_bytes` only with `use_payload_refs`,
  `max_interval_ms` not below `initial_interval_ms`. Schema-valid values
  are moved to agree (times near now, the second of a pair dropped); a value
  that breaks its own schema is left as it is, so negative cases stay
  negative.
- `POST /tasks/batch` answers an item that breaks its schema with that item's
  400 inside a 200 (every item is submitted as if alone): a negative case
  whose envelope is valid (an object with only `tasks`, a list of 1 to 100
  items) is no batch to reject, so its `negative_data_rejection` failure is
  dropped. Every other check still runs on it, and a malformed envelope must
  still be rejected.
"""

import datetime
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
        agreeing_options(case.body)
        for item in case.body.get("tasks") or [] if isinstance(case.body.get("tasks"), list) else []:
            if isinstance(item, dict):
                unique_key(item)
                agreeing_options(item)
    return case


def is_int(v, lo, hi):
    # A whole number, written either way (`60` or `60.0`): JSON Schema's
    # integer, as the service reads it.
    return (
        isinstance(v, (int, float))
        and not isinstance(v, bool)
        and float(v).is_integer()
        and lo <= v <= hi
    )


RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def is_time(v):
    # A date-time as the schema's format says (its shape: a generated one
    # is a valid date), whatever Python's own parser makes of it.
    return isinstance(v, str) and RFC3339.match(v) is not None


def agreeing_options(body):
    now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    rfc = lambda t: t.strftime("%Y-%m-%dT%H:%M:%SZ")
    if is_time(body.get("schedule_at")):
        body["schedule_at"] = rfc(now + datetime.timedelta(seconds=120))
    if is_int(body.get("delay_seconds"), 0, 31536000):
        body["delay_seconds"] = int(body["delay_seconds"]) % 600
    if body.get("schedule_at") is not None and body.get("delay_seconds") is not None:
        if is_int(body["delay_seconds"], 0, 600) or body["delay_seconds"] is None:
            del body["delay_seconds"]
        elif is_time(body["schedule_at"]):
            del body["schedule_at"]
    if is_int(body.get("ttl_seconds"), 1, 315360000):
        body["ttl_seconds"] = 3600 + int(body["ttl_seconds"]) % 86400
    if is_time(body.get("expires_at")):
        body["expires_at"] = rfc(now + datetime.timedelta(days=2))
    if body.get("ttl_seconds") is not None and body.get("expires_at") is not None:
        if is_time(body["expires_at"]):
            del body["expires_at"]
        elif is_int(body["ttl_seconds"], 3600, 90000):
            del body["ttl_seconds"]
    if body.get("payload_ref_threshold_bytes") is not None and body.get("use_payload_refs") is not True:
        if body.get("use_payload_refs") is None or isinstance(body.get("use_payload_refs"), bool):
            body["use_payload_refs"] = True
    policy = body.get("retry_policy")
    if isinstance(policy, dict):
        lo, hi = policy.get("initial_interval_ms"), policy.get("max_interval_ms")
        if is_int(lo, 0, 86400000) and is_int(hi, 0, 86400000) and hi < lo:
            policy["max_interval_ms"] = lo
        elif is_int(lo, 0, 86400000) and hi is None and lo > 60000:
            policy["max_interval_ms"] = lo
        elif lo is None and is_int(hi, 0, 86400000) and hi < 1000:
            policy["initial_interval_ms"] = hi


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
