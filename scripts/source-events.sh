#!/usr/bin/env bash
# Writes the sample events of the event sources (SOURCES) into events/, as
# the pinned SAM CLI generates them (`make tools`): `sam local generate-event`
# has no `eventbridge` command in this version, so EventBridge's shape is its
# `cloudwatch scheduled-event` (a rule's scheduled event: source aws.events,
# detail-type "Scheduled Event"). The SQS events are SAM's `sqs
# receive-message` with the body replaced by what SNS (raw delivery off), S3
# and an EventBridge SQS target put there: SAM's own SNS, S3 and EventBridge
# events. Run it again after a SAM CLI upgrade; tests/sources_events.rs
# submits every file.
set -euo pipefail
source "$(dirname "$0")/tools.sh"
cd "$tools_root/events"
gen() { sam local generate-event "$@"; }

gen cloudwatch scheduled-event --rule nightly-report > eventbridge-scheduled.json
gen sns notification --topic orders --subject order \
  --message '{\"order\":\"ORD-123\",\"cents\":1999}' > sns-notification.json
gen s3 put --bucket uploads --key 'incoming/report 1.csv' > s3-put.json
gen sqs receive-message > /tmp/sqs-$$.json

python3 - /tmp/sqs-$$.json <<'PY'
import json, sys
sqs = json.load(open(sys.argv[1]))
def wrap(name, body, queue):
    e = json.loads(json.dumps(sqs))
    r = e["Records"][0]
    r["body"] = json.dumps(body)
    r["eventSourceARN"] = f"arn:aws:sqs:us-east-1:123456789012:{queue}"
    # The body changed: its MD5 is not SAM's any more, and nothing reads it.
    r.pop("md5OfBody", None)
    json.dump(e, open(name, "w"), indent=2)
    open(name, "a").write("\n")
sns = json.load(open("sns-notification.json"))["Records"][0]["Sns"]
wrap("sqs-sns-envelope.json", sns, "orders-inbox")
wrap("sqs-s3-put.json", json.load(open("s3-put.json")), "uploads-inbox")
wrap("sqs-eventbridge.json", json.load(open("eventbridge-scheduled.json")), "events-inbox")
# S3's "Object Created" through EventBridge: SAM's EventBridge envelope with
# the detail S3 sends there, of SAM's S3 put (the key as S3 names it, not
# URL-encoded).
eb = json.load(open("eventbridge-scheduled.json"))
obj = json.load(open("s3-put.json"))["Records"][0]["s3"]
eb.update({"id": "17793124-05d4-b198-2fde-7ededc63b103", "source": "aws.s3",
           "detail-type": "Object Created", "resources": [obj["bucket"]["arn"]]})
eb["detail"] = {"version": "0", "bucket": {"name": obj["bucket"]["name"]},
                "object": {"key": "incoming/report 1.csv", "size": obj["object"]["size"],
                           "etag": obj["object"]["eTag"], "sequencer": obj["object"]["sequencer"]},
                "request-id": "EXAMPLE123456789", "requester": "123456789012",
                "source-ip-address": "127.0.0.1", "reason": "PutObject"}
json.dump(eb, open("eventbridge-s3-object-created.json", "w"), indent=2)
open("eventbridge-s3-object-created.json", "a").write("\n")
PY
rm -f /tmp/sqs-$$.json
