#!/usr/bin/env python3
"""An SNS topic on moto, subscribed by SQS queues, and one message published.

    moto_sns.py ENDPOINT TOPIC MESSAGE ENVELOPED_QUEUE_ARN RAW_QUEUE_ARN

Subscribes the first queue with raw message delivery off (SQS gets SNS's
JSON envelope) and the second with it on (SQS gets the message alone), then
publishes MESSAGE once. Prints {"topic_arn", "message_id"} as JSON. moto's
SNS delivers into its own SQS queues in the same server, as SNS does.
"""
import json
import sys

import boto3

endpoint, topic, message, enveloped, raw = sys.argv[1:6]
sns = boto3.client(
    "sns",
    endpoint_url=endpoint,
    region_name="us-east-1",
    aws_access_key_id="test",
    aws_secret_access_key="test",
)
arn = sns.create_topic(Name=topic)["TopicArn"]
for queue, is_raw in ((enveloped, "false"), (raw, "true")):
    sns.subscribe(
        TopicArn=arn,
        Protocol="sqs",
        Endpoint=queue,
        Attributes={"RawMessageDelivery": is_raw},
    )
sent = sns.publish(TopicArn=arn, Message=message)
print(json.dumps({"topic_arn": arn, "message_id": sent["MessageId"]}))
