#!/usr/bin/env bash
# make deploy-check: the template deploys the way a user's first `sam build`
# builds it. The SAM CLI from the pinned tools (scripts/tools.sh); installs
# cargo-lambda, pinned in requirements-lambda.txt, with pip (into .venv/);
# `sam validate --lint`; `sam build` for x86_64 (this machine has no aarch64
# standard library, so arm64, the default, cannot be built here); then runs
# each built bootstrap from .aws-sam/build/ as Lambda would, under a runtime
# API stand-in (scripts/api_front.py), against the moto S3 of with-moto.sh:
# one submit, its replay, one sweep (PASS_CONCURRENCY=4), one continuation
# of a pass and the schedule's message from the pass queue. Run it through scripts/with-moto.sh.
# SCHEMAS=on: the functions built with the `schemas` feature
# (CARGO_LAMBDA_CONTEXT=schemas, CargoLambda.toml) and run with
# VALIDATE_INPUT_SCHEMAS=on, a published schema refusing an input; otherwise
# the default build, whose submit function stops at start when
# VALIDATE_INPUT_SCHEMAS=on, saying how to build it.
set -euo pipefail
SCHEMAS=${SCHEMAS:-off}
cd "$(dirname "$0")/.."
start=$(date +%s)

. scripts/tools.sh
python3 -m pip install --quiet --disable-pip-version-check -r requirements-lambda.txt
hash -r
export AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
export SAM_CLI_TELEMETRY=0

echo "== sam validate --lint"
sam validate --lint --template template.yaml

echo "== sam build (x86_64, schemas $SCHEMAS)"
if [ "$SCHEMAS" = on ]; then export CARGO_LAMBDA_CONTEXT=schemas; fi
sam build --template template.yaml --beta-features \
  --parameter-overrides Architecture=x86_64 --build-dir .aws-sam/build
for f in SubmitFunction SweepFunction; do
  test -x ".aws-sam/build/$f/bootstrap" || { echo "no .aws-sam/build/$f/bootstrap" >&2; exit 1; }
  file ".aws-sam/build/$f/bootstrap" 2>/dev/null || true
done

bucket="deploy-check-$$"
python3 - "$bucket" <<'PY'
import os, sys, boto3
boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"], region_name="us-east-1",
             aws_access_key_id="test", aws_secret_access_key="test").create_bucket(Bucket=sys.argv[1])
PY

run_front() { # binary port log
  BUCKET_NAME="$bucket" S3_FORCE_PATH_STYLE=true VALIDATE_INPUT_SCHEMAS="$SCHEMAS" \
    PASS_CONCURRENCY=4 python3 scripts/api_front.py "$1" "$2" >"$3" 2>&1 &
  echo $!
}

if [ "$SCHEMAS" != on ]; then
  # A build without the validator refuses VALIDATE_INPUT_SCHEMAS=on at start.
  if out=$(env -i PATH="$PATH" BUCKET_NAME="$bucket" VALIDATE_INPUT_SCHEMAS=on \
      AWS_LAMBDA_RUNTIME_API=127.0.0.1:9 .aws-sam/build/SubmitFunction/bootstrap 2>&1); then
    echo "submit started with VALIDATE_INPUT_SCHEMAS=on and no validator" >&2; exit 1
  fi
  grep -q -- "--features schemas" <<<"$out" || { echo "no build hint in: $out" >&2; exit 1; }
  echo "submit without the schemas feature, VALIDATE_INPUT_SCHEMAS=on: stopped at start, saying how to build it"
fi
wait_front() { # log pid
  for _ in $(seq 1 100); do
    grep -q "submit on" "$1" && return 0
    kill -0 "$2" 2>/dev/null || { cat "$1" >&2; return 1; }
    sleep 0.1
  done
  return 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'; }

p1=$(free_port); l1=$(mktemp); p2=$(free_port); l2=$(mktemp)
pid1=$(run_front .aws-sam/build/SubmitFunction/bootstrap "$p1" "$l1")
pid2=$(run_front .aws-sam/build/SweepFunction/bootstrap "$p2" "$l2")
trap 'kill $pid1 $pid2 2>/dev/null || true; rm -f "$l1" "$l2"' EXIT INT TERM
wait_front "$l1" "$pid1"; wait_front "$l2" "$pid2"

SCHEMAS="$SCHEMAS" BUCKET="$bucket" python3 - "$p1" "$p2" <<'PY'
import json, os, sys, urllib.request
submit, sweep = (f"http://127.0.0.1:{p}" for p in sys.argv[1:3])
def call(url, body, headers):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        r = urllib.request.urlopen(req)
    except urllib.error.HTTPError as e:
        r = e
    return r.status, dict(r.headers), json.loads(r.read() or b"null")
body = {"task_type": "charge_customer", "input": {"order": "ORD-1", "cents": 5}}
h = {"content-type": "application/json", "idempotency-key": '"deploy-check-1"'}
s1, h1, b1 = call(f"{submit}/tasks", body, h)
assert s1 == 201, (s1, b1)
s2, h2, b2 = call(f"{submit}/tasks", body, h)
assert s2 == 200 and b2["task_id"] == b1["task_id"] and h2.get("idempotent-replayed") == "true", (s2, h2, b2)
print(f"submit: 201 {b1['task_id']}; replay: 200, the same task")
if os.environ.get("SCHEMAS") == "on":
    import boto3
    boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"], region_name="us-east-1",
                 aws_access_key_id="test", aws_secret_access_key="test").put_object(
        Bucket=os.environ["BUCKET"], Key="schemas/send_email.json",
        Body=json.dumps({"input": {"type": "object", "required": ["to"],
                                   "properties": {"to": {"type": "string"}}}}))
    s4, _, b4 = call(f"{submit}/tasks", {"task_type": "send_email", "input": {"to": 5}},
                     {"content-type": "application/json"})
    assert s4 == 400 and b4.get("code") == "input_invalid", (s4, b4)
    s5, _, b5 = call(f"{submit}/tasks", {"task_type": "send_email", "input": {"to": "a@b.c"}},
                     {"content-type": "application/json"})
    assert s5 == 201, (s5, b5)
    print("schemas: an input its published schema refuses is 400 input_invalid; a valid one 201")
s3, _, summary = call(f"{sweep}/__invoke", {}, {"content-type": "application/json"})
assert s3 == 200 and summary.get("complete") is True and summary.get("errors") == 0, (s3, summary)
print(f"sweep: {json.dumps(summary, sort_keys=True)}")
# A continuation of that pass, as the pass queue's mapping hands it over: one
# share of the pass it names, which is over; acknowledged.
import datetime
record = {"messageId": "c1", "receiptHandle": "r", "eventSource": "aws:sqs",
          "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:pass", "awsRegion": "us-east-1",
          "attributes": {}, "messageAttributes": {}, "md5OfBody": "",
          "body": json.dumps({"sweep_pass": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")})}
s6, _, answer = call(f"{sweep}/__invoke", {"Records": [record]}, {"content-type": "application/json"})
assert s6 == 200 and answer == {"batchItemFailures": []}, (s6, answer)
print("sweep: a pass queue continuation, acknowledged")
# The schedule's own message, as EventBridge Scheduler sends it to the pass
# queue (template.yaml's PassSchedule): it opens the day's pass and runs it.
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
scheduled = dict(record, messageId="s1", body=json.dumps({"schedule": now}))
s7, _, answer = call(f"{sweep}/__invoke", {"Records": [scheduled]}, {"content-type": "application/json"})
assert s7 == 200 and answer == {"batchItemFailures": []}, (s7, answer)
print("sweep: the schedule's message through the pass queue, its pass run and acknowledged")
PY
echo "deploy-check passed in $(( $(date +%s) - start )) s"
