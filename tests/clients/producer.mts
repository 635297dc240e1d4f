// A producer written in TypeScript against the types that openapi-typescript
// generates from docs/openapi.yaml, calling the service through openapi-fetch,
// as a TypeScript user of the API would. tests/clients/test_generated_clients.py
// generates `api.d.ts` beside a copy of this file in a temporary directory,
// compiles both with tsc (strict: a type error fails the test), and runs the
// result against the real `submit` function:
//
//     node producer.mjs BASE_URL RUN_ID
//
// It asserts as it goes and prints one line, `ok <task id>`, at the end.
//
// Typed end to end: every body is read through its generated type, every
// union is narrowed by its constants (`status_code`, `code`) down to one
// variant, and each narrowing is exhaustive (a `never` at its end). The
// `@ts-expect-error` lines hold the other way round: were a union to decay
// to `any` or `unknown` (a schema the generator dropped), the directive
// would go unused, and tsc fails on that too.

import assert from "node:assert/strict";
import createClient from "openapi-fetch";
import type { components, paths } from "./api.js";

type Schemas = components["schemas"];

const [baseUrl, run] = process.argv.slice(2);
assert.ok(baseUrl && run, "usage: producer.mjs BASE_URL RUN_ID");
const client = createClient<paths>({ baseUrl });

function unreachable(x: never): never {
  throw new Error(`a variant the document does not name: ${JSON.stringify(x)}`);
}

/** One batch result, narrowed to its variant: what a producer does with it. */
function outcome(r: Schemas["BatchResult"]): string {
  // @ts-expect-error only a success has a task_key: not before narrowing
  void r.task_key;
  if ("status_code" in r) {
    switch (r.status_code) {
      case 201: {
        const created: Schemas["BatchCreated"] = r;
        assert.equal(created.replayed, false);
        return `created ${created.task_id}`;
      }
      case 200: {
        const replayed: Schemas["BatchReplayed"] = r;
        assert.equal(replayed.replayed, true);
        return `replayed ${replayed.task_id}`;
      }
      default:
        return unreachable(r);
    }
  }
  switch (r.code) {
    case "idempotency_conflict":
      return `conflict ${r.task_id}`;
    case "input_invalid":
      return `input_invalid ${r.errors.map((e) => e.pointer).sort().join(",")}`;
    case "invalid_request":
    case "idempotency_key_missing":
    case "input_too_large":
    case "storage_error":
    case "storage_unavailable":
    case "submit_in_progress":
      return `${r.code} ${r.status}`;
    default:
      return unreachable(r);
  }
}

const key = `ts-order-${run}`;
const body = { task_type: "charge_customer", input: { order: key, cents: 1999 } };

// A create: 201, the success type, its task id.
const created = await client.POST("/tasks", {
  params: { header: { "Idempotency-Key": key } },
  body,
});
assert.equal(created.response.status, 201);
assert.ok(created.data, `a 201 is read as Submitted: ${JSON.stringify(created.error)}`);
const task: Schemas["Submitted"] = created.data;
assert.match(task.task_id, /^[0-9a-f-]{36}$/);
assert.equal(task.replayed, false);
assert.equal(task.idempotency?.key, key);
assert.equal(created.response.headers.get("location"), `/tasks/${task.task_id}`);

// A replay: 200, the same task.
const replay = await client.POST("/tasks", {
  params: { header: { "Idempotency-Key": key } },
  body,
});
assert.equal(replay.response.status, 200);
assert.equal(replay.data?.task_id, task.task_id);
assert.equal(replay.data?.replayed, true);

// A conflict: 422, narrowed by its code to the conflict, which names the task.
const conflict = await client.POST("/tasks", {
  params: { header: { "Idempotency-Key": key } },
  body: { ...body, input: { order: key, cents: 1 } },
});
assert.equal(conflict.response.status, 422);
assert.ok(conflict.error);
const problem = conflict.error;
// @ts-expect-error only a conflict has a task_id: not before narrowing
void problem.task_id;
assert.equal(problem.code, "idempotency_conflict");
if (problem.code !== "idempotency_conflict") throw new Error("unreachable");
const conflictProblem: Schemas["IdempotencyConflict"] = problem;
assert.equal(conflictProblem.task_id, task.task_id);
assert.equal(conflictProblem.status, 422);

// The task, as the queue's workers see it.
const got = await client.GET("/tasks/{task_id}", {
  params: { path: { task_id: task.task_id } },
});
assert.equal(got.response.status, 200);
const taskObject: Schemas["Task"] | undefined = got.data;
assert.equal(taskObject?.id, task.task_id);
assert.equal(taskObject?.task_type, "charge_customer");
assert.deepEqual(taskObject?.input, body.input);

// A batch of a new key, the replayed one, a conflict and an invalid input:
// each result read as its own variant.
const batch = await client.POST("/tasks/batch", {
  body: {
    tasks: [
      { task_type: "charge_customer", input: { order: `${key}-b` }, idempotency_key: `${key}-b` },
      { ...body, idempotency_key: key },
      { task_type: "charge_customer", input: { other: true }, idempotency_key: key },
      { task_type: "send_email", input: { to: 1 }, idempotency_key: `${key}-mail` },
    ],
  },
});
assert.equal(batch.response.status, 200);
assert.ok(batch.data);
const outcomes = batch.data.results.map(outcome);
assert.match(outcomes[0] ?? "", /^created [0-9a-f-]{36}$/);
assert.notEqual(outcomes[0], `created ${task.task_id}`);
assert.deepEqual(outcomes.slice(1), [
  `replayed ${task.task_id}`,
  `conflict ${task.task_id}`,
  "input_invalid ,/to",
]);

// An input its task type's schema refuses: 400 input_invalid, its failures.
const invalid = await client.POST("/tasks", {
  params: { header: { "Idempotency-Key": `${key}-mail` } },
  body: { task_type: "send_email", input: { to: 1 } },
});
assert.equal(invalid.response.status, 400);
assert.ok(invalid.error);
const bad = invalid.error;
switch (bad.code) {
  case "input_invalid": {
    const failures: Schemas["InputFailure"][] = bad.errors;
    assert.deepEqual(
      failures.map((f) => [f.pointer, f.keyword]).sort(),
      [["", "required"], ["/to", "type"]],
    );
    assert.equal(bad.errors_omitted, 0);
    break;
  }
  default:
    assert.fail(`a 400 input_invalid, not ${JSON.stringify(bad)}`);
}

// The key's record, looked up by key and scope, then the key reset: the
// next submit of it makes a new task (the old one is left as it is).
const keyPath = { params: { path: { key }, query: { scope: "charge_customer" } } };
const looked = await client.GET("/idempotency-keys/{key}", keyPath);
assert.equal(looked.response.status, 200);
const record: Schemas["KeyRecord"] | undefined = looked.data;
assert.equal(record?.task_id, task.task_id);
const phase: "in_flight" | "settled" | undefined = record?.phase;
assert.equal(phase, "in_flight");
// Answered at once: the task is there, and the reset writes a reset
// record over the record instead of deleting it.
const reset = await client.DELETE("/idempotency-keys/{key}", keyPath);
assert.equal(reset.response.status, 204);
assert.match(reset.response.headers.get("link") ?? "", new RegExp(`/tasks/${task.task_id}>`));
const gone = await client.GET("/idempotency-keys/{key}", keyPath);
assert.equal(gone.response.status, 404);
assert.equal(gone.error?.code, "not_found");

console.log(`ok ${task.task_id}`);
