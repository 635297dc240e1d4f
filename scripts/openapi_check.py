#!/usr/bin/env python3
"""Checks answers of the submit function against docs/openapi.yaml.

  openapi_check.py DOC --doc     the document is valid OpenAPI 3.1 and every
                                 example in it validates against its schema
  openapi_check.py DOC --serve   reads answers, one JSON object per line:
                                 {"method", "path", "status", "headers", "body"}
                                 (the Lambda proxy answer's fields; `path` is
                                 the request's path), and writes one line per
                                 answer: "ok", or "error: <why>"

The tests keep one --serve process per test binary (tests/common/openapi.rs),
so every handler answer is checked: a status, header, content type or body
field the document does not describe fails the test that produced it.
"""

import json
import re
import sys

import yaml
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_spec


def load(path):
    with open(path) as f:
        return yaml.safe_load(f)


def pointer(doc, ref):
    node = doc
    for part in ref.lstrip("#/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def deref(doc, node):
    while isinstance(node, dict) and "$ref" in node and len(node) == 1:
        node = pointer(doc, node["$ref"])
    return node


class Checker:
    def __init__(self, doc):
        self.doc = doc
        self.format_checker = Draft202012Validator.FORMAT_CHECKER
        self.validators = {}

    def schema_errors(self, schema, value):
        key = json.dumps(schema, sort_keys=True)
        v = self.validators.get(key)
        if v is None:
            # The document is the root resource, so "#/components/..." resolves.
            root = dict(self.doc)
            root.pop("$ref", None)
            root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
            root["allOf"] = [schema]
            v = self.validators[key] = Draft202012Validator(root, format_checker=self.format_checker)
        return [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in v.iter_errors(value)]

    def route(self, path):
        segs = [s for s in path.split("/") if s]
        if "idempotency-keys" in segs[:2] and segs[-1] != "idempotency-keys":
            return "/idempotency-keys/{key}"
        if segs[-1:] == ["tasks"]:
            return "/tasks"
        if segs[-2:] == ["tasks", "batch"]:
            return "/tasks/batch"
        if len(segs) >= 2 and segs[-2] == "tasks":
            return "/tasks/{task_id}"
        return None

    def check(self, a):
        status = str(a["status"])
        headers = {k.lower(): v for k, v in (a.get("headers") or {}).items()}
        route = self.route(a["path"])
        method = a["method"].lower()
        if route is None or method not in self.doc["paths"][route]:
            # Unknown routes and methods answer 404/405 problems: checked
            # against those responses of any operation.
            op = self.doc["paths"]["/tasks"]["post"]
        else:
            op = self.doc["paths"][route][method]
        responses = op["responses"]
        if status not in responses:
            return f"{a['method']} {a['path']}: status {status} is not documented"
        resp = deref(self.doc, responses[status])
        for name, h in (resp.get("headers") or {}).items():
            h = deref(self.doc, h)
            value = headers.get(name.lower())
            if value is None:
                if h.get("required"):
                    return f"{status}: header {name} missing"
                continue
            errs = self.schema_errors(h["schema"], value)
            if errs:
                return f"{status}: header {name}={value!r}: {errs[0]}"
        documented = {n.lower() for n in (resp.get("headers") or {})} | {"content-type"}
        for name in headers:
            if name not in documented:
                return f"{status}: header {name} is not documented"
        ctype = headers.get("content-type", "").split(";")[0].strip()
        content = resp.get("content") or {}
        if not content:
            # A response without content (a 204) has no body and no type.
            if a["body"] not in ("", None) or ctype:
                return f"{status}: a body or content type where none is documented"
            return None
        if ctype not in content:
            return f"{status}: content type {ctype!r} is not documented ({list(content)})"
        try:
            body = json.loads(a["body"]) if isinstance(a["body"], str) else a["body"]
        except ValueError as e:
            return f"{status}: body is not JSON: {e}"
        errs = self.schema_errors(content[ctype]["schema"], body)
        if errs:
            return f"{status} {ctype}: {'; '.join(errs[:3])}"
        return None

    def check_examples(self):
        bad = []

        def walk(node, where):
            if isinstance(node, dict):
                if "schema" in node and "examples" in node:
                    for name, ex in node["examples"].items():
                        for e in self.schema_errors(node["schema"], ex["value"]):
                            bad.append(f"{where}/examples/{name}: {e}")
                for k, v in node.items():
                    walk(v, f"{where}/{k}")
            elif isinstance(node, list):
                for i, v in enumerate(node):
                    walk(v, f"{where}/{i}")

        walk(self.doc, "#")
        return bad


def main():
    doc_path, mode = sys.argv[1], sys.argv[2]
    doc = load(doc_path)
    checker = Checker(doc)
    if mode == "--doc":
        validate_spec(doc)
        bad = checker.check_examples()
        for b in bad:
            print(b, file=sys.stderr)
        if bad:
            sys.exit(1)
        print(f"{doc_path}: valid OpenAPI {doc['openapi']}; its examples match their schemas")
        return
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            why = checker.check(json.loads(line))
        except Exception as e:  # a checker bug must fail the test, not hang it
            why = f"checker failed: {e!r}"
        print("ok" if why is None else f"error: {why}", flush=True)


if __name__ == "__main__":
    main()
