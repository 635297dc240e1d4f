#!/usr/bin/env python3
"""moto's S3 server, serving one request at a time.

`moto_server` serves requests on threads, and moto's conditional PUT checks
the key and then writes it, without a lock: two `If-None-Match: *` writes of
one key can both pass the check. S3 makes that check atomic, and the protocol
depends on it. Served one request at a time, moto's conditional writes are
atomic too. (It costs nothing measurable: moto holds the GIL while it works,
so its threads never ran side by side anyway.)

Its S3 event notifications get the two fields S3 sends and moto leaves out
(`sequencer`, and `versionId` on a versioned bucket), see
`_notifications_as_s3_sends_them`.

It also rewrites two answers that moto gets wrong, GetBucketVersioning and
GetBucketNotificationConfiguration. S3 answers
`<VersioningConfiguration><Status>Enabled</Status>...` and
`<NotificationConfiguration>...`; moto 5 names the root elements
`GetBucketVersioningResponse` and `GetBucketNotificationResponse`. The Rust
SDK's deserializers check the root's name ("encountered invalid XML root:
expected VersioningConfiguration"), so buquet's clients, which check
versioning at start, fail with an S3 service error on any moto bucket, and
`idem doctor` could not read either. Only the root's name is changed; the
elements inside are S3's.

    moto_serial.py [-H HOST] [-p PORT]
"""
import argparse
import os
import selectors

import werkzeug.serving
from werkzeug.serving import BaseWSGIServer, run_simple

from moto import backends
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app


# The bucket subresource, moto's root element, S3's root element.
_ROOTS = {
    "versioning": (b"GetBucketVersioningResponse", b"VersioningConfiguration"),
    "notification": (b"GetBucketNotificationResponse", b"NotificationConfiguration"),
}


def _misnamed_roots(environ):
    """The (moto, S3) root names of this request's answer, if moto misnames it."""
    if environ.get("REQUEST_METHOD") != "GET":
        return None
    params = [p.split("=", 1)[0] for p in environ.get("QUERY_STRING", "").split("&")]
    for sub, roots in _ROOTS.items():
        if sub in params:
            return roots
    return None


def s3_answers(app):
    """`app`, with moto's misnamed answers in S3's shape."""

    def wrapped(environ, start_response):
        roots = _misnamed_roots(environ)
        if roots is None:
            return app(environ, start_response)
        moto_root, s3_root = roots
        captured = {}

        def capture(status, headers, exc_info=None):
            captured["status"], captured["headers"] = status, headers
            return lambda _data: None

        chunks = app(environ, capture)
        try:
            body = b"".join(chunks)
        finally:
            if hasattr(chunks, "close"):
                chunks.close()
        body = body.replace(b"<" + moto_root, b"<" + s3_root).replace(
            b"</" + moto_root + b">", b"</" + s3_root + b">"
        )
        headers = [(k, v) for k, v in captured["headers"] if k.lower() != "content-length"]
        headers.append(("Content-Length", str(len(body))))
        start_response(captured["status"], headers)
        return [body]

    return wrapped


class _NoWaitSelectors:
    """werkzeug's `selectors`, but a select never waits.

    After each answer, werkzeug drains what the client may still send, waiting
    up to 10 ms for it (`selector.select(timeout=0.01)`), and only then closes
    the connection. A client that reads the answer at once closes first, and
    the wait ends early; one that is 100 ms away (the bench's delaying link,
    or any real network) makes every request cost moto 10 ms more, one
    request at a time: a batch of 300 requests read as 6 round trips more
    than it took. Draining what has already arrived keeps werkzeug's reason
    for the drain (a client that sent a body the app did not read sees the
    answer, not a reset): our clients send each request whole.
    """

    class DefaultSelector(selectors.DefaultSelector):
        def select(self, timeout=None):
            return super().select(timeout=0)


def _backends_found_once():
    """moto's answer to "which service is this request for?", found once.

    moto 5's dispatcher asks, for every request, whether the Host header
    names one of its modules, and answers by listing its package directory
    and calling `isdir` on each of its 150-odd entries. Profiled (py-spy)
    under the chaos world, that was a quarter of this server's time, one
    request at a time. The directory does not change while the server runs,
    so the answer is the same list every time; only its cost goes.
    """
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules

    # The same question's other half: each Host header is matched against
    # every service's URL patterns in turn. A function of the host alone.
    found = {}
    by_patterns = DomainDispatcherApplication.get_backend_for_host

    def backend_for_host(self, host):
        if host not in found:
            found[host] = by_patterns(self, host)
        return found[host]

    DomainDispatcherApplication.get_backend_for_host = backend_for_host


def _listings_by_prefix():
    """moto's listings, reading only the keys under their prefix.

    moto lists a prefix by walking every key of the bucket (a copy of its
    key dictionary, then each key's latest version) and keeping those that
    start with the prefix, so a LIST of `ready/3/` costs the whole bucket:
    every task, record, payload and marker ever written, delete markers
    included. buquet's workers list `ready/{shard}/` on every poll, and the
    chaos world's bucket grows through the run, so its listings took a
    growing share of this server's time. Here each key store keeps its key
    names in order (kept by the writes moto makes: a new key, a replaced
    version list, a key dropped; rebuilt whenever the count says a write
    went around them), and while a prefixed listing runs, the store hands
    moto only the keys under that prefix, by bisection. moto's own listing
    code then does all it did before (delimiters, delete markers, order,
    pages) on the keys it would have kept anyway: the answers are the same.
    One request at a time (this server), so one listing at a time.
    """
    from bisect import bisect_left, insort

    from moto.s3.models import S3Backend
    from moto.s3.utils import _VersionedKeyStore as Store

    def names(store):
        kept = store.__dict__.get("_names")
        if kept is None or len(kept) != dict.__len__(store):
            kept = store.__dict__["_names"] = sorted(dict.keys(store))
        return kept

    def noted(write):
        def wrapper(store, key, value):
            new = not dict.__contains__(store, key)
            write(store, key, value)
            kept = store.__dict__.get("_names")
            if new and kept is not None and dict.__contains__(store, key):
                insort(kept, key)

        return wrapper

    pop = Store.pop

    def dropped(store, key):
        pop(store, key)
        kept = store.__dict__.get("_names")
        if kept is not None:
            i = bisect_left(kept, key)
            if i < len(kept) and kept[i] == key:
                del kept[i]

    Store.__setitem__ = noted(Store.__setitem__)
    Store.setlist = noted(Store.setlist)
    Store.pop = dropped

    listing = {"prefix": None}
    every_item = Store.items

    def items(store):
        prefix = listing["prefix"]
        if not prefix:
            return every_item(store)
        kept = names(store)
        end = start = bisect_left(kept, prefix)
        while end < len(kept) and kept[end].startswith(prefix):
            end += 1
        return [(k, store[k]) for k in kept[start:end]]

    Store.items = items
    list_objects = S3Backend.list_objects

    def list_by_prefix(backend, bucket, prefix, *args, **kwargs):
        listing["prefix"] = prefix
        try:
            return list_objects(backend, bucket, prefix, *args, **kwargs)
        finally:
            listing["prefix"] = None

    S3Backend.list_objects = list_by_prefix


def _notifications_as_s3_sends_them():
    """moto's S3 event notifications, with `sequencer` and `versionId`.

    S3 puts in every object-created record the object's `sequencer` (a hex
    string that grows with each write of a key, the same in every
    notification of one write) and, on a versioned bucket, its `versionId`;
    moto 5 sends neither. They are what tells a new write of a key from a
    redelivery of the same one (the default key of an S3 source, SOURCES),
    so without them no moto notification could be taken. Each key object
    (one per write) gets its sequencer once, from a counter.
    """
    import itertools

    from moto.s3 import notifications

    counter = itertools.count(1)
    event = notifications._get_s3_event

    def with_identity(event_name, bucket, key, notification_id):
        body = event(event_name, bucket, key, notification_id)
        if "_sequencer" not in key.__dict__:
            key.__dict__["_sequencer"] = "%016X" % next(counter)
        obj = body["Records"][0]["s3"]["object"]
        obj["sequencer"] = key.__dict__["_sequencer"]
        if getattr(bucket, "is_versioned", False) and getattr(key, "_version_id", None):
            obj["versionId"] = key._version_id
        return body

    notifications._get_s3_event = with_identity


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, default=5000)
    args = parser.parse_args()
    os.environ.setdefault("MOTO_PORT", str(args.port))
    _backends_found_once()
    _listings_by_prefix()
    _notifications_as_s3_sends_them()
    app = s3_answers(DomainDispatcherApplication(create_backend_app))
    werkzeug.serving.selectors = _NoWaitSelectors
    # A burst of new connections (a batch's 200 writes) overflows werkzeug's
    # listen backlog of 128 while moto serves one at a time; the kernel then
    # drops their SYNs, and each waits 1 s or 3 s to retransmit. S3 drops
    # none.
    BaseWSGIServer.request_queue_size = 4096
    run_simple(args.host, args.port, app, threaded=False, use_reloader=False)


if __name__ == "__main__":
    main()
