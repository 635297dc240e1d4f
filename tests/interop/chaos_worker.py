#!/usr/bin/env python3
"""A buquet 0.1 worker (the queue's own, from PyPI) for the chaos world,
tests/chaos.rs. Every run of a task is one line of RUNS_FILE, written before
the handler returns: {"id", "worker", "input"}, the input as the handler got
it (an offloaded one loaded with buquet's queue.load_input).

    chaos_worker.py WORKER_ID RUNS_FILE TYPES MAX_POLL_MS SHARDS

TYPES: comma-separated task types; SHARDS: the hex digits of the shards it
polls (the world gives each worker its own share of the 16). It runs until
it is killed. Environment: BUQUET_ENDPOINT, BUQUET_BUCKET, AWS test
credentials (as buquet_client.py).
"""
import asyncio
import json
import os
import sys

import buquet


async def main(worker_id, runs_file, types, max_poll_ms, shards):
    q = await buquet.connect(
        endpoint=os.environ["BUQUET_ENDPOINT"],
        bucket=os.environ["BUQUET_BUCKET"],
        region=os.environ.get("AWS_REGION", "us-east-1"),
    )
    worker = buquet.Worker(q, worker_id, list(shards))
    out = open(runs_file, "a", buffering=1)

    async def handle(data, ctx):
        if data is None:
            task = await q.get(ctx.task_id)
            data = await q.load_input(task)
        out.write(json.dumps({"id": ctx.task_id, "worker": worker_id, "input": data}) + "\n")
        out.flush()
        return {"ok": True}

    for t in types:
        worker.task(t)(handle)
    # No monitor: nothing on this worker's link fails and no task outlives
    # its timeout, and the monitor's scans would take moto's time.
    opts = buquet.WorkerRunOptions(
        polling=buquet.PollingStrategy.adaptive(
            min_interval_ms=100, max_interval_ms=max_poll_ms, backoff_multiplier=2.0
        ),
        with_monitor=False,
    )
    await worker.run(opts)


if __name__ == "__main__":
    wid, runs, types, max_poll = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])
    asyncio.run(main(wid, runs, types, max_poll, sys.argv[5]))
