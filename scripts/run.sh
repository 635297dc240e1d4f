#!/usr/bin/env bash
# make run: the service on this machine. A moto S3 and SQS server on loopback
# with a versioned bucket, its lifecycle rules, its due queue and the bucket's
# notification of record writes to it (as template.yaml sets them up);
# `cargo lambda watch` serving the `submit` and `sweep` functions
# (function URLs on http://127.0.0.1:$INVOKE_PORT/lambda-url/<function>/);
# and, in the background, the due queue drained as the event source mapping
# would (`idem sweep --due-queue`, every DUE_POLL_SECONDS), so that an
# interrupted submit is finished STALE_CREATING_AFTER_SECONDS later (30 s
# here, 600 deployed) with nothing to do by hand.
# RECORD_EVENTS=submitter (make run RECORD_EVENTS=submitter) runs a bucket
# that sends no events, as another provider's does: no notification is
# configured, and the submit function sends each record's due message to
# the same due queue itself (DUE_QUEUE_URL); the drain is the same.
# Uses the pinned Python tools (.venv/, scripts/tools.sh); installs
# cargo-lambda, pinned in requirements-lambda.txt, with pip (into .venv/).
# Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."

INVOKE_PORT="${INVOKE_PORT:-9000}"
MOTO_PORT="${MOTO_PORT:-4566}"
BUCKET="${BUCKET_NAME:-local-queue}"
# Short locally, so that an interrupted submit is seen finished soon.
STALE="${STALE_CREATING_AFTER_SECONDS:-30}"
DUE_POLL="${DUE_POLL_SECONDS:-5}"
RECORD_EVENTS="${RECORD_EVENTS:-bucket}"
case "$RECORD_EVENTS" in
  bucket|submitter) ;;
  *) echo "RECORD_EVENTS=$RECORD_EVENTS: must be bucket or submitter" >&2; exit 2 ;;
esac

# moto on MOTO_PORT, started and stopped as the tests start it
# (scripts/with-moto.sh, which also puts the pinned tools first on PATH):
# this script runs again under it.
if [ -z "${S3_TEST_ENDPOINT:-}" ]; then
  MOTO_PORT="$MOTO_PORT" exec ./scripts/with-moto.sh "$(pwd)/scripts/run.sh" "$@"
fi
python3 -m pip install --quiet --disable-pip-version-check -r requirements-lambda.txt
hash -r

cleanup() {
  [ -n "${drain_pid:-}" ] && kill "$drain_pid" 2>/dev/null || true
  [ -n "${watch_pid:-}" ] && kill "$watch_pid" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

due_url=$(python3 - "$MOTO_PORT" "$BUCKET" "$STALE" "$RECORD_EVENTS" <<'PY'
import sys, time, boto3
port, bucket, stale, record_events = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
kw = dict(endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
          aws_access_key_id="test", aws_secret_access_key="test")
s3 = boto3.client("s3", **kw)
sqs = boto3.client("sqs", **kw)
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
# Versioned, with template.yaml's lifecycle rules (its parameters' defaults).
s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
def rule(id, prefix, **actions):
    return {"ID": id, "Status": "Enabled", "Filter": {"Prefix": prefix}, **actions}
noncurrent = {"NoncurrentVersionExpiration": {"NoncurrentDays": 1}}
markers = {"Expiration": {"ExpiredObjectDeleteMarker": True}}
s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": [
    rule("idempotency-backstop", "idempotency/", Expiration={"Days": 366}, **noncurrent),
    rule("idempotency-delete-markers", "idempotency/", **markers),
    rule("rejected-messages", "rejected/", Expiration={"Days": 30}, **noncurrent),
    rule("rejected-delete-markers", "rejected/", **markers),
    rule("payloads-noncurrent", "payloads/", **markers, **noncurrent),
    rule("abort-incomplete-uploads", "", AbortIncompleteMultipartUpload={"DaysAfterInitiation": 7}),
]})
# The due queue: every record write, STALE_CREATING_AFTER_SECONDS later.
url = sqs.create_queue(QueueName=f"{bucket}-due", Attributes={"DelaySeconds": stale})["QueueUrl"]
arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
# The bucket's notification of record writes, or (submitter) none at all: a
# bucket that sends no events.
queues = [] if record_events == "submitter" else [{
    "QueueArn": arn,
    "Events": ["s3:ObjectCreated:*"],
    "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "idempotency/"}]}},
}]
s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={
    "QueueConfigurations": queues})
print(url)
PY
)

env_file=$(mktemp -t idempotent-submit-env.XXXXXX)
cat >"$env_file" <<ENV
BUCKET_NAME=$BUCKET
AWS_ENDPOINT_URL_S3=http://127.0.0.1:$MOTO_PORT
AWS_ENDPOINT_URL_SQS=http://127.0.0.1:$MOTO_PORT
STALE_CREATING_AFTER_SECONDS=$STALE
S3_FORCE_PATH_STYLE=true
AWS_ACCESS_KEY_ID=test
AWS_SECRET_ACCESS_KEY=test
AWS_REGION=us-east-1
RUST_LOG=${RUST_LOG:-info}
RECORD_EVENTS=$RECORD_EVENTS
DUE_QUEUE_URL=$due_url
ENV
if [ "$RECORD_EVENTS" = submitter ]; then
  sent_by="each record's due message sent by the submit function itself (RECORD_EVENTS=submitter; the bucket sends no events)"
else
  sent_by="the bucket's record events"
fi

url="http://127.0.0.1:$INVOKE_PORT/lambda-url/submit"
cat <<MSG

  S3 (moto):  http://127.0.0.1:$MOTO_PORT  bucket $BUCKET
  due queue:  $due_url
              $sent_by,
              STALE_CREATING_AFTER_SECONDS=${STALE} s later; drained every ${DUE_POLL} s
              (an interrupted submit is finished about ${STALE} s after its record)
  submit:     $url/tasks

  Try it (the first request builds the function):

  curl -i -X POST $url/tasks -H 'content-type: application/json' \\
       -H 'Idempotency-Key: "charge-ORD-123"' \\
       -d '{"task_type":"charge_customer","input":{"order":"ORD-123","cents":1999}}'
  # 201 Created, then 200 with Idempotent-Replayed: true when sent again

  curl -i $url/tasks/<task_id>        # the task object
  # cargo-lambda is in .venv/bin/, not on PATH:
  .venv/bin/cargo-lambda lambda invoke -P $INVOKE_PORT submit --data-file events/sqs-standard-batch.json
  .venv/bin/cargo-lambda lambda invoke -P $INVOKE_PORT sweep --data-file events/sweep-dry-run.json

  # What the bucket has and lacks (versioning, notification or due queue, lifecycle):
  BUCKET_NAME=$BUCKET AWS_ENDPOINT_URL=http://127.0.0.1:$MOTO_PORT S3_FORCE_PATH_STYLE=true \\
    AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1 \\
    RECORD_EVENTS=$RECORD_EVENTS DUE_QUEUE_URL=$due_url STALE_CREATING_AFTER_SECONDS=$STALE \\
    target/debug/idem doctor

  Ctrl-C stops everything.

MSG

# The due queue, drained as the event source mapping would: short polls
# (a long poll would hold moto's one-at-a-time server), every DUE_POLL s.
# Cargo lambda watch does not poll SQS.
cargo build --locked --bin idem
(
  export BUCKET_NAME="$BUCKET" AWS_ENDPOINT_URL="http://127.0.0.1:$MOTO_PORT" S3_FORCE_PATH_STYLE=true \
    STALE_CREATING_AFTER_SECONDS="$STALE" AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test AWS_REGION=us-east-1
  while sleep "$DUE_POLL"; do
    out=$(target/debug/idem sweep --due-queue "$due_url" --wait-seconds 0 2>/dev/null) || true
    case "$out" in
      *'"messages":0,'*|*'"messages":0}'*) ;;
      *) echo "[due queue] $out" ;;
    esac
  done
) &
drain_pid=$!

cargo lambda watch --invoke-port "$INVOKE_PORT" --env-file "$env_file" &
watch_pid=$!
wait "$watch_pid"
