#!/usr/bin/env python3
"""moto's S3 server, serving one request at a time.

`moto_server` serves requests on threads, and moto's conditional PUT checks
the key and then writes it, without a lock: two `If-None-Match: *` writes of
one key can both pass the check. S3 makes that check atomic, and the protocol
depends on it. Served one request at a time, moto's conditional writes are
atomic too. (It costs nothing measurable: moto holds the GIL while it works,
so its threads never ran side by side anyway.)

    moto_serial.py [-H HOST] [-p PORT]
"""
import argparse
import os

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(args.host, args.port, app, threaded=False, use_reloader=False)


if __name__ == "__main__":
    main()
