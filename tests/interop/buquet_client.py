#!/usr/bin/env python3
"""The queue's own Python client (buquet, from PyPI), driven by tests/interop.rs.

    buquet_client.py submit TYPE INPUT_JSON KEY [SCOPE]   -> {"id", "status"}
    buquet_client.py work TYPE COUNT                      -> {"processed"}
    buquet_client.py get TASK_ID                          -> the task as buquet sees it
    buquet_client.py idle TYPE SECONDS                    -> a worker polls that long: {"processed"}

Environment: BUQUET_ENDPOINT, BUQUET_BUCKET, AWS test credentials, and
BUQUET_ALLOW_NO_VERSIONING=1 for an unversioned bucket.
"""
import asyncio
import json
import os
import sys

# buquet checks at connect that the bucket is versioned, unless
# BUQUET_ALLOW_NO_VERSIONING=1 (tests/interop.rs sets it for its unversioned
# bucket only). moto's own GetBucketVersioning answer has a root element the
# Rust SDK inside buquet refuses; scripts/moto_serial.py answers in S3's shape.
import buquet


async def connect():
    return await buquet.connect(
        endpoint=os.environ["BUQUET_ENDPOINT"],
        bucket=os.environ["BUQUET_BUCKET"],
        region=os.environ.get("AWS_REGION", "us-east-1"),
    )


async def main(argv):
    q = await connect()
    cmd = argv[0]
    if cmd == "submit":
        task_type, data, key = argv[1], json.loads(argv[2]), argv[3]
        scope = argv[4] if len(argv) > 4 else None
        t = await q.submit(task_type, data, idempotency_key=key, idempotency_scope=scope)
        print(json.dumps({"id": str(t.id), "status": str(t.status)}))
    elif cmd == "work":
        task_type, count = argv[1], int(argv[2])
        worker = buquet.Worker(q, "interop-worker", [format(i, "x") for i in range(16)])

        @worker.task(task_type)
        async def handle(data):
            return {"handled": data}

        opts = buquet.WorkerRunOptions(max_tasks=count, with_monitor=False, poll_interval_ms=100)
        processed = await asyncio.wait_for(worker.run(opts), timeout=60)
        print(json.dumps({"processed": processed}))
    elif cmd == "idle":
        task_type, seconds = argv[1], float(argv[2])
        worker = buquet.Worker(q, "idle-worker", [format(i, "x") for i in range(16)])

        @worker.task(task_type)
        async def handle(data):
            return {"handled": data}

        opts = buquet.WorkerRunOptions(with_monitor=False, poll_interval_ms=100)
        try:
            processed = await asyncio.wait_for(worker.run(opts), timeout=seconds)
        except asyncio.TimeoutError:
            processed = 0
        print(json.dumps({"processed": processed}))
    elif cmd == "get":
        t = await q.get(argv[1])
        if t is None:
            print("null")
        else:
            print(json.dumps({"id": str(t.id), "status": str(t.status), "output": await q.load_output(t)}))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
    sys.stdout.flush()
    # buquet 0.1's native runtime sometimes aborts while the interpreter
    # tears down (SIGABRT after the work is done); leave without teardown.
    os._exit(0)
