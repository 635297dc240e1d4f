#!/usr/bin/env python3
"""The queue's own Python client (buquet, from PyPI), driven by tests/interop.rs.

    buquet_client.py submit TYPE INPUT_JSON KEY [SCOPE]   -> {"id", "status"}
    buquet_client.py work TYPE COUNT                      -> {"processed"}
    buquet_client.py fail TYPE COUNT                      -> a worker whose handler raises buquet's
                                                           PermanentError (the task ends `failed`
                                                           at once, whatever its max_retries):
                                                           {"processed"}
    buquet_client.py cancel TASK_ID REASON                -> queue.cancel of a pending task:
                                                           {"id", "status"}
    buquet_client.py get TASK_ID                          -> the task as buquet sees it
    buquet_client.py idle TYPE SECONDS                    -> a worker polls that long: {"processed"}
    buquet_client.py submit_opts TYPE INPUT_JSON OPTS_JSON  -> {"id"}: buquet's submit with task options
    buquet_client.py slow TYPE TASK_ID SECONDS            -> a worker (with its timeout monitor) whose
                                                           handler sleeps 2 s (then waits for the
                                                           monitor to take the task back), until
                                                           the task fails:
                                                           {"calls", "status", "retry_count", "last_error"}
    buquet_client.py load TYPE COUNT                      -> a worker whose handler reads its input with
                                                           queue.load_input: {"processed", "loaded"}
    buquet_client.py publish_schema TYPE SCHEMA_JSON      -> queue.publish_schema(TYPE, SCHEMA): {"published"}
    buquet_client.py validate TYPE INPUT_JSON             -> buquet's own check of INPUT against TYPE's
                                                           published schema (get_schema, validate_input):
                                                           {"valid", "error"}

Environment: BUQUET_ENDPOINT, BUQUET_BUCKET, AWS test credentials, and
BUQUET_ALLOW_NO_VERSIONING=1 for an unversioned bucket.
"""
import asyncio
import datetime
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


def worker(q, name, task_type, handle):
    """A worker of every shard whose handler for `task_type` is `handle`."""
    w = buquet.Worker(q, name, [format(i, "x") for i in range(16)])
    w.task(task_type)(handle)
    return w


async def run_for(w, count):
    """Runs `w`, without its timeout monitor, until it has handled `count`
    tasks (60 s at most): how many it handled."""
    opts = buquet.WorkerRunOptions(max_tasks=count, with_monitor=False, poll_interval_ms=100)
    return await asyncio.wait_for(w.run(opts), timeout=60)


async def handled(data):
    return {"handled": data}


async def declined(data):
    raise buquet.PermanentError(f"declined: {json.dumps(data, sort_keys=True)}")


async def main(argv):
    q = await connect()
    cmd = argv[0]
    if cmd == "submit":
        task_type, data, key = argv[1], json.loads(argv[2]), argv[3]
        scope = argv[4] if len(argv) > 4 else None
        t = await q.submit(task_type, data, idempotency_key=key, idempotency_scope=scope)
        print(json.dumps({"id": str(t.id), "status": str(t.status)}))
    elif cmd in ("work", "fail"):
        task_type, count = argv[1], int(argv[2])
        if cmd == "work":
            w = worker(q, "interop-worker", task_type, handled)
        else:
            w = worker(q, "failing-worker", task_type, declined)
        print(json.dumps({"processed": await run_for(w, count)}))
    elif cmd == "cancel":
        t = await q.cancel(argv[1], reason=argv[2])
        print(json.dumps({"id": str(t.id), "status": str(t.status)}))
    elif cmd == "idle":
        task_type, seconds = argv[1], float(argv[2])
        w = worker(q, "idle-worker", task_type, handled)
        opts = buquet.WorkerRunOptions(with_monitor=False, poll_interval_ms=100)
        try:
            processed = await asyncio.wait_for(w.run(opts), timeout=seconds)
        except asyncio.TimeoutError:
            processed = 0
        print(json.dumps({"processed": processed}))
    elif cmd == "submit_opts":
        task_type, data, opts = argv[1], json.loads(argv[2]), json.loads(argv[3])
        for f in ("schedule_at", "expires_at"):
            if f in opts:
                opts[f] = datetime.datetime.fromisoformat(opts[f].replace("Z", "+00:00"))
        if "retry_policy" in opts:
            opts["retry_policy"] = buquet.RetryPolicy(**opts["retry_policy"])
        t = await q.submit(task_type, data, **opts)
        print(json.dumps({"id": str(t.id)}))
    elif cmd == "slow":
        task_type, task_id, seconds = argv[1], argv[2], float(argv[3])
        calls = []

        async def slow(data, ctx):
            calls.append(1)
            before = (await q.get(ctx.task_id)).retry_count
            await asyncio.sleep(2)
            # buquet times a task out with its monitor, which checks leases
            # every second: a handler that returned before the monitor's
            # next check would still complete the task. So this one, once
            # past its timeout, also waits (at most 20 s) until the monitor
            # has taken the task back (retried or failed it).
            for _ in range(100):
                t = await q.get(ctx.task_id)
                if t is None or not str(t.status).lower().endswith("running") or t.retry_count != before:
                    break
                await asyncio.sleep(0.2)
            return {"handled": data}

        w = worker(q, "slow-worker", task_type, slow)
        opts = buquet.WorkerRunOptions(with_monitor=True, monitor_check_interval_s=1, poll_interval_ms=100)
        run = asyncio.ensure_future(w.run(opts))
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        t = None
        while loop.time() < end:
            await asyncio.sleep(0.5)
            t = await q.get(task_id)
            if t is not None and str(t.status).lower().endswith("failed"):
                break
        run.cancel()
        print(json.dumps({"calls": len(calls), "status": str(t.status) if t else None,
                          "retry_count": t.retry_count if t else None,
                          "last_error": t.last_error if t else None}))
    elif cmd == "load":
        task_type, count = argv[1], int(argv[2])
        loaded = []

        async def load(data, ctx):
            task = await q.get(ctx.task_id)
            full = await q.load_input(task)
            loaded.append({"inline": data, "loaded": full})
            return {"size": len(json.dumps(full))}

        processed = await run_for(worker(q, "load-worker", task_type, load), count)
        print(json.dumps({"processed": processed, "loaded": loaded}))
    elif cmd == "publish_schema":
        task_type, schema = argv[1], json.loads(argv[2])
        await q.publish_schema(task_type, schema)
        print(json.dumps({"published": task_type}))
    elif cmd == "validate":
        task_type, data = argv[1], json.loads(argv[2])
        schema = await q.get_schema(task_type)
        try:
            q.validate_input(schema, data)
            print(json.dumps({"valid": True, "error": None}))
        except Exception as e:  # buquet raises a ValueError subclass
            print(json.dumps({"valid": False, "error": str(e)}))
    elif cmd == "get":
        t = await q.get(argv[1])
        if t is None:
            print("null")
        else:
            print(json.dumps({"id": str(t.id), "status": str(t.status), "output": await q.load_output(t),
                              "last_error": t.last_error}))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
    sys.stdout.flush()
    # buquet 0.1's native runtime sometimes aborts while the interpreter
    # tears down (SIGABRT after the work is done); leave without teardown.
    os._exit(0)
