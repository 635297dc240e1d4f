#!/usr/bin/env python3
"""The built `submit` function as an HTTP service, without Docker or AWS.

    api_front.py BINARY PORT

Starts a stand-in of the Lambda runtime API on a free loopback port, runs
BINARY (the `submit` bootstrap) against it as Lambda would
(AWS_LAMBDA_RUNTIME_API, the function's environment from ours), and serves
HTTP on 127.0.0.1:PORT: each request becomes an HTTP API (payload 2.0)
event, as API Gateway's `$default` stage sends it, and the function's answer
becomes the HTTP response; `POST /__invoke` with any event (a schedule's, an
SQS batch) invokes the function with it as is and answers its JSON. A function error or crash is a 502, as API Gateway
answers it. One invocation at a time, like one Lambda execution environment.
Used by `make test` and `make api-fuzz` to drive the real function with
Schemathesis (docs/openapi.yaml), and by `make deploy-check`.

The Rust tests have a runtime API stand-in of their own
(tests/common/runtime_api.rs) and need one: they queue raw events and read
what the function posted back (errors, init errors, request ids, the time of
its first poll for the bench's cold start) inside the test process, where
this one is a separate HTTP server that answers in API Gateway's terms.
"""

import base64
import json
import os
import queue
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PREFIX = "/2018-06-01/runtime"
# POST an event here to invoke the function with it as is.
RAW_INVOKE = "/__invoke"


class Invocation:
    def __init__(self, event):
        self.id = str(uuid.uuid4())
        self.event = event
        self.done = threading.Event()
        self.answer = None
        self.error = None


pending = queue.Queue()
by_id = {}
one_at_a_time = threading.Lock()


class Runtime(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, code, body=b"", headers=()):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path != f"{PREFIX}/invocation/next":
            return self.reply(404)
        inv = pending.get()
        by_id[inv.id] = inv
        deadline = int(time.time() * 1000) + 30_000
        self.reply(
            200,
            json.dumps(inv.event).encode(),
            [
                ("Content-Type", "application/json"),
                ("Lambda-Runtime-Aws-Request-Id", inv.id),
                ("Lambda-Runtime-Deadline-Ms", str(deadline)),
                ("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:submit"),
                ("Lambda-Runtime-Trace-Id", "Root=1-00000000-000000000000000000000000"),
            ],
        )

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        parts = self.path[len(PREFIX):].strip("/").split("/")
        if parts[:1] == ["init"]:
            print(f"the function failed to start: {body.decode(errors='replace')}", file=sys.stderr)
            self.reply(202)
            os._exit(1)
        if len(parts) == 3 and parts[0] == "invocation" and parts[1] in by_id:
            inv = by_id.pop(parts[1])
            if parts[2] == "response":
                inv.answer = json.loads(body)
            else:
                inv.error = body.decode(errors="replace")
            inv.done.set()
            return self.reply(202)
        self.reply(404)


def event_for(handler, body):
    path, _, query = handler.path.partition("?")
    headers = {}
    for k, v in handler.headers.items():
        k = k.lower()
        headers[k] = f"{headers[k]},{v}" if k in headers else v
    try:
        text, b64 = body.decode("utf-8"), False
    except UnicodeDecodeError:
        text, b64 = base64.b64encode(body).decode(), True
    now = time.time()
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": path,
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": "127.0.0.1",
            "domainPrefix": "local",
            "http": {
                "method": handler.command,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": handler.client_address[0],
                "userAgent": headers.get("user-agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "body": text if body else None,
        "isBase64Encoded": b64,
    }


class Front(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def handle_any(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == RAW_INVOKE and self.command == "POST":
            return self.invoke_raw(body)
        inv = Invocation(event_for(self, body))
        with one_at_a_time:
            pending.put(inv)
            if not inv.done.wait(35):
                return self.send_plain(504, "the function did not answer")
        if inv.error is not None:
            return self.send_plain(502, f"the function failed: {inv.error}")
        a = inv.answer
        if not isinstance(a, dict) or "statusCode" not in a:
            return self.send_plain(502, f"not an HTTP answer: {a!r}")
        out = a.get("body") or ""
        out = base64.b64decode(out) if a.get("isBase64Encoded") else out.encode()
        self.send_response(int(a["statusCode"]))
        for k, v in (a.get("headers") or {}).items():
            self.send_header(k, v)
        for c in a.get("cookies") or []:
            self.send_header("Set-Cookie", c)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def invoke_raw(self, body):
        """Any event (a scheduled one, an SQS batch): the function's answer,
        as JSON, or a 502 with its error."""
        inv = Invocation(json.loads(body or b"{}"))
        with one_at_a_time:
            pending.put(inv)
            if not inv.done.wait(150):
                return self.send_plain(504, "the function did not answer")
        if inv.error is not None:
            return self.send_plain(502, inv.error)
        out = json.dumps(inv.answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def send_plain(self, code, text):
        out = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def __getattr__(self, name):
        # Every method reaches the function, as API Gateway passes any.
        if name.startswith("do_"):
            return self.handle_any
        raise AttributeError(name)


def main():
    binary, port = sys.argv[1], int(sys.argv[2])
    runtime = ThreadingHTTPServer(("127.0.0.1", 0), Runtime)
    threading.Thread(target=runtime.serve_forever, daemon=True).start()
    env = dict(os.environ)
    env["AWS_LAMBDA_RUNTIME_API"] = f"127.0.0.1:{runtime.server_address[1]}"
    env.setdefault("AWS_LAMBDA_FUNCTION_NAME", "submit")
    env.setdefault("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
    env.setdefault("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
    env.setdefault("AWS_LAMBDA_LOG_LEVEL", "WARN")
    fn = subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL)

    def watch():
        code = fn.wait()
        print(f"the function exited ({code})", file=sys.stderr)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
    front = ThreadingHTTPServer(("127.0.0.1", port), Front)
    print(f"submit on http://127.0.0.1:{port}", flush=True)
    try:
        front.serve_forever()
    finally:
        fn.kill()


if __name__ == "__main__":
    main()
