#!/usr/bin/env bash
# make run: the service on this machine. A moto S3 server on loopback with a
# bucket, and `cargo lambda watch` serving the `submit` and `sweep` functions
# (function URLs on http://127.0.0.1:$INVOKE_PORT/lambda-url/<function>/).
# Installs moto[server] and cargo-lambda with pip where they are missing.
# Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."

INVOKE_PORT="${INVOKE_PORT:-9000}"
MOTO_PORT="${MOTO_PORT:-4566}"
BUCKET="${BUCKET_NAME:-local-queue}"

python3 -c 'import moto.server' >/dev/null 2>&1 || python3 -m pip install --quiet 'moto[server]>=5.1'
command -v cargo-lambda >/dev/null 2>&1 || python3 -m pip install --quiet cargo-lambda
hash -r

python3 scripts/moto_serial.py -H 127.0.0.1 -p "$MOTO_PORT" >/tmp/idempotent-submit-moto.log 2>&1 &
moto_pid=$!
cleanup() {
  kill "$moto_pid" 2>/dev/null || true
  [ -n "${watch_pid:-}" ] && kill "$watch_pid" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

python3 - "$MOTO_PORT" "$BUCKET" <<'PY'
import sys, time, boto3
port, bucket = sys.argv[1], sys.argv[2]
s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                  aws_access_key_id="test", aws_secret_access_key="test")
for _ in range(100):
    try:
        s3.create_bucket(Bucket=bucket)
        break
    except s3.exceptions.BucketAlreadyOwnedByYou:
        break
    except Exception:
        time.sleep(0.1)
else:
    sys.exit("moto did not start")
PY

env_file=$(mktemp -t idempotent-submit-env.XXXXXX)
cat >"$env_file" <<ENV
BUCKET_NAME=$BUCKET
AWS_ENDPOINT_URL_S3=http://127.0.0.1:$MOTO_PORT
S3_FORCE_PATH_STYLE=true
AWS_ACCESS_KEY_ID=test
AWS_SECRET_ACCESS_KEY=test
AWS_REGION=us-east-1
RUST_LOG=${RUST_LOG:-info}
ENV

url="http://127.0.0.1:$INVOKE_PORT/lambda-url/submit"
cat <<MSG

  S3 (moto):  http://127.0.0.1:$MOTO_PORT  bucket $BUCKET
  submit:     $url/tasks

  Try it (the first request builds the function):

  curl -i -X POST $url/tasks -H 'content-type: application/json' \\
       -H 'Idempotency-Key: "charge-ORD-123"' \\
       -d '{"task_type":"charge_customer","input":{"order":"ORD-123","cents":1999}}'
  # 201 Created, then 200 with Idempotent-Replayed: true when sent again

  curl -i $url/tasks/<task_id>        # the task object
  cargo lambda invoke submit --data-file events/sqs-standard-batch.json
  cargo lambda invoke sweep --data-file events/sweep-dry-run.json

  Ctrl-C stops everything.

MSG

cargo lambda watch --invoke-port "$INVOKE_PORT" --env-file "$env_file" &
watch_pid=$!
wait "$watch_pid"
