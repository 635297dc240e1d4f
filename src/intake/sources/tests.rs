//! `SOURCES` entries, one test per shape refused, and the mapping of each
//! kind of event to a submit.

use serde_json::{Value, json};

use super::mapping::prefixed_key;
use super::*;

const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:orders";
const QUEUE: &str = "arn:aws:sqs:us-east-1:123456789012:inbox";

fn one(entry: Value) -> Result<Sources, String> {
    Sources::parse(&json!([entry]).to_string()).map_err(|e| e.0)
}

fn refused(entry: Value, says: &str) {
    let e = one(entry.clone()).expect_err(&entry.to_string());
    assert!(e.contains(says), "{entry}: {e}");
}

fn sns_source() -> Value {
    json!({"name": "orders", "match": {"sns": {"topic_arn": TOPIC}}, "task_type": "ship"})
}

#[test]
fn a_setting_that_is_not_a_json_array_of_objects_is_refused() {
    assert!(
        Sources::parse("{")
            .unwrap_err()
            .0
            .contains("not valid JSON")
    );
    assert!(Sources::parse("{}").unwrap_err().0.contains("array"));
    assert!(Sources::parse("[1]").unwrap_err().0.contains("JSON object"));
    assert!(Sources::parse("[]").unwrap().is_empty());
}

#[test]
fn a_source_needs_a_plain_name_and_names_are_unique() {
    let mut e = sns_source();
    e.as_object_mut().unwrap().remove("name");
    refused(e, "name is required");
    for bad in ["", ".x", "a:b", "a/b", &"n".repeat(65)] {
        let mut e = sns_source();
        e["name"] = json!(bad);
        refused(e, "name");
    }
    let twice = json!([sns_source(), sns_source()]).to_string();
    assert!(
        Sources::parse(&twice)
            .unwrap_err()
            .0
            .contains("already taken")
    );
}

#[test]
fn a_match_has_exactly_one_known_kind_with_its_fields() {
    let with = |m: Value| {
        let mut e = sns_source();
        e["match"] = m;
        e
    };
    refused(with(json!(null)), "match must be a JSON object");
    refused(with(json!({})), "exactly one");
    refused(
        with(json!({"sns": {"topic_arn": TOPIC}, "sqs": {"queue_arn": QUEUE}})),
        "exactly one",
    );
    refused(with(json!({"kafka": {}})), "unknown kind");
    refused(with(json!({"sns": {}})), "topic_arn is required");
    refused(
        with(json!({"sns": {"topic_arn": "orders"}})),
        "not an sns ARN",
    );
    refused(with(json!({"sns": {"topic_arn": QUEUE}})), "not an sns ARN");
    refused(with(json!({"sqs": {"queue_arn": TOPIC}})), "not an sqs ARN");
    refused(
        with(json!({"sns": {"topic_arn": TOPIC, "filter": 1}})),
        "unknown field",
    );
    refused(
        with(json!({"eventbridge": {"detail_type": "x"}})),
        "source is required",
    );
    refused(
        with(json!({"eventbridge": {"source": ""}})),
        "non-empty string",
    );
    refused(with(json!({"s3": {"prefix": "in/"}})), "bucket is required");
    refused(
        with(json!({"s3": {"bucket": "b", "prefix": 3}})),
        "prefix must be a string",
    );
    refused(json!({"name": "n", "task_type": "t"}), "match is required");
}

#[test]
fn the_task_type_is_fixed_or_a_pointer_never_both_nor_neither() {
    let mut e = sns_source();
    e["task_type_pointer"] = json!("/message/kind");
    refused(e.clone(), "not both");
    e.as_object_mut().unwrap().remove("task_type");
    assert!(one(e).is_ok());
    let mut e = sns_source();
    e.as_object_mut().unwrap().remove("task_type");
    refused(e, "task_type (or task_type_pointer) is required");
    let mut e = sns_source();
    e["task_type"] = json!("no spaces");
    refused(e, "task_type");
}

#[test]
fn pointers_must_be_json_pointers_into_the_event_or_the_message() {
    for field in ["key_pointer", "input_pointer", "task_type_pointer"] {
        let mut e = sns_source();
        if field == "task_type_pointer" {
            e.as_object_mut().unwrap().remove("task_type");
        }
        e[field] = json!("detail.id");
        refused(e.clone(), field);
        e[field] = json!("/detail/id");
        refused(e.clone(), "/event or /message");
        e[field] = json!(7);
        refused(e, "must be a string");
    }
}

#[test]
fn the_submit_fields_are_checked_as_a_post_tasks_body_would_be() {
    let with = |k: &str, v: Value| {
        let mut e = sns_source();
        e[k] = v;
        e
    };
    refused(with("input", json!(1)), "comes from the event");
    refused(with("idempotency_key", json!("k")), "comes from the event");
    refused(with("idempotency_ky", json!("k")), "unknown field");
    refused(with("idempotency_scope", json!("a b")), "idempotency_scope");
    refused(
        with("idempotency_ttl_seconds", json!(60)),
        "idempotency_ttl_seconds",
    );
    refused(with("if_task_failed", json!("again")), "if_task_failed");
    refused(with("max_retries", json!(-1)), "max_retries");
    let mut both = with("ttl_seconds", json!(3600));
    both["expires_at"] = json!("2030-01-01T00:00:00Z");
    refused(both, "contradicts");
    let good = with("idempotency_scope", json!("queue"));
    let s = one(good).unwrap();
    assert_eq!(s.0[0].submit["idempotency_scope"], "queue");
}

fn sns_notification(message: &str, id: &str) -> Value {
    json!({"Type": "Notification", "MessageId": id, "TopicArn": TOPIC,
           "Message": message, "Timestamp": "2026-01-01T00:00:00Z"})
}

fn mapped(sources: &Sources, readings: &[Delivery]) -> Result<Mapped, Refusal> {
    let (s, d) = sources.find(readings).expect("a source matches");
    s.map(d)
}

#[test]
fn each_kind_is_keyed_by_its_own_delivery_identity_by_default() {
    let sources = Sources::parse(
        &json!([
            sns_source(),
            {"name": "uploads", "match": {"s3": {"bucket": "in", "prefix": "new/"}}, "task_type": "scan"},
            {"name": "billing", "match": {"eventbridge": {"source": "shop", "detail_type": "Paid"}}, "task_type": "bill"},
            {"name": "inbox", "match": {"sqs": {"queue_arn": QUEUE}}, "task_type": "read"}
        ])
        .to_string(),
    )
    .unwrap();
    let sns = Delivery::sns(&sns_notification(r#"{"order":1}"#, "m-1")).unwrap();
    let m = mapped(&sources, &[sns]).unwrap();
    assert_eq!(
        (m.key.as_str(), m.body.input.clone()),
        ("orders:m-1", json!({"order": 1}))
    );
    let record = json!({"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "in"},
        "object": {"key": "new/a+b%2B.csv", "size": 3, "versionId": "v1", "sequencer": "0A"}}});
    let m = mapped(&sources, &[Delivery::s3_record(&record).unwrap()]).unwrap();
    assert_eq!(m.key, "uploads:in/new/a b+.csv@v1");
    assert_eq!(m.body.input["key"], "new/a b+.csv");
    let mut unversioned = record.clone();
    unversioned["s3"]["object"]
        .as_object_mut()
        .unwrap()
        .remove("versionId");
    let m = mapped(&sources, &[Delivery::s3_record(&unversioned).unwrap()]).unwrap();
    assert_eq!(m.key, "uploads:in/new/a b+.csv#0A");
    let event = json!({"id": "e-1", "source": "shop", "detail-type": "Paid", "detail": {"n": 2}});
    let m = mapped(&sources, &Delivery::eventbridge(&event)).unwrap();
    assert_eq!(
        (m.key.as_str(), m.body.input.clone()),
        ("billing:e-1", json!({"n": 2}))
    );
    let sqs = Delivery::sqs(
        QUEUE,
        Some("q-1".into()),
        json!({"messageId": "q-1"}),
        r#"{"x":1}"#,
    );
    let m = mapped(&sources, &[sqs]).unwrap();
    assert_eq!(
        (m.key.as_str(), m.body.task_type.as_str()),
        ("inbox:q-1", "read")
    );
}

#[test]
fn s3_object_created_through_eventbridge_reads_as_s3s_own_notification() {
    let sources = Sources::parse(
        &json!([{"name": "uploads", "match": {"s3": {"bucket": "in"}}, "task_type": "scan"}])
            .to_string(),
    )
    .unwrap();
    let event = json!({"id": "e-9", "source": "aws.s3", "detail-type": "Object Created",
        "detail": {"bucket": {"name": "in"}, "object": {"key": "k.csv", "size": 5, "sequencer": "0B"}}});
    let m = mapped(&sources, &Delivery::eventbridge(&event)).unwrap();
    assert_eq!(m.key, "uploads:in/k.csv#0B");
    assert_eq!(m.body.input["size"], 5);
}

#[test]
fn two_sources_that_find_the_same_key_make_two_keys() {
    let a = json!({"name": "a", "match": {"eventbridge": {"source": "shop"}}, "task_type": "t",
                   "key_pointer": "/message/order"});
    let b = json!({"name": "b", "match": {"sns": {"topic_arn": TOPIC}}, "task_type": "t",
                   "key_pointer": "/message/order"});
    let sources = Sources::parse(&json!([a, b]).to_string()).unwrap();
    let eb = json!({"id": "1", "source": "shop", "detail-type": "x", "detail": {"order": "o-7"}});
    let sns = Delivery::sns(&sns_notification(r#"{"order":"o-7"}"#, "m")).unwrap();
    let ka = mapped(&sources, &Delivery::eventbridge(&eb)).unwrap().key;
    let kb = mapped(&sources, &[sns]).unwrap().key;
    assert_eq!((ka.as_str(), kb.as_str()), ("a:o-7", "b:o-7"));
}

#[test]
fn a_key_pointer_that_finds_nothing_a_non_string_or_an_empty_string_is_refused() {
    let mut e = sns_source();
    e["key_pointer"] = json!("/message/order");
    let sources = one(e).unwrap();
    for (message, says) in [
        (r#"{"other":1}"#, "finds nothing"),
        (r#"{"order":17}"#, "finds a number"),
        (r#"{"order":{"id":1}}"#, "finds a object"),
        (r#"{"order":""}"#, "empty string"),
        ("plain text", "not JSON"),
    ] {
        let d = Delivery::sns(&sns_notification(message, "m")).unwrap();
        let r = mapped(&sources, &[d]).unwrap_err();
        assert_eq!(r.source_name.as_deref(), Some("orders"));
        assert!(r.to_string().contains(says), "{message}: {r}");
    }
}

#[test]
fn a_message_that_is_not_json_is_refused_as_input_but_the_event_may_be_taken_whole() {
    let sources = one(sns_source()).unwrap();
    let d = Delivery::sns(&sns_notification("plain text", "m-2")).unwrap();
    let r = mapped(&sources, std::slice::from_ref(&d)).unwrap_err();
    assert!(r.to_string().contains("input is not JSON"), "{r}");
    let mut e = sns_source();
    e["input_pointer"] = json!("/event");
    let m = mapped(&one(e).unwrap(), &[d]).unwrap();
    assert_eq!(m.body.input["Message"], "plain text");
}

#[test]
fn the_first_declared_source_that_matches_takes_the_event() {
    let wide =
        json!({"name": "all", "match": {"eventbridge": {"source": "shop"}}, "task_type": "a"});
    let narrow = json!({"name": "paid", "match": {"eventbridge": {"source": "shop", "detail_type": "Paid"}}, "task_type": "p"});
    let event = json!({"id": "1", "source": "shop", "detail-type": "Paid", "detail": {}});
    let s = Sources::parse(&json!([narrow.clone(), wide.clone()]).to_string()).unwrap();
    assert_eq!(
        mapped(&s, &Delivery::eventbridge(&event)).unwrap().source,
        "paid"
    );
    let s = Sources::parse(&json!([wide, narrow]).to_string()).unwrap();
    assert_eq!(
        mapped(&s, &Delivery::eventbridge(&event)).unwrap().source,
        "all"
    );
    let other = json!({"id": "2", "source": "elsewhere", "detail-type": "Paid", "detail": {}});
    assert!(s.find(&Delivery::eventbridge(&other)).is_none());
}

#[test]
fn an_s3_event_that_is_no_object_creation_or_has_no_identity_is_refused() {
    let removed = json!({"eventName": "ObjectRemoved:Delete", "s3": {"bucket": {"name": "in"}, "object": {"key": "k"}}});
    assert!(
        Delivery::s3_record(&removed)
            .unwrap_err()
            .contains("not an object creation")
    );
    let bare = json!({"eventName": "ObjectCreated:Put", "s3": {"bucket": {"name": "in"}, "object": {"key": "k", "versionId": "null"}}});
    let sources =
        one(json!({"name": "u", "match": {"s3": {"bucket": "in"}}, "task_type": "t"})).unwrap();
    let r = mapped(&sources, &[Delivery::s3_record(&bare).unwrap()]).unwrap_err();
    assert!(r.to_string().contains("no delivery identity"), "{r}");
}

#[test]
fn a_prefixed_key_too_long_for_a_key_or_with_control_characters_is_hashed() {
    assert_eq!(prefixed_key("s", "k-1"), "s:k-1");
    let long = "x".repeat(300);
    let k = prefixed_key("s", &long);
    assert!(k.starts_with("s:sha256:") && k.len() == 2 + 7 + 64, "{k}");
    assert_eq!(k, prefixed_key("s", &long), "deterministic");
    assert_ne!(k, prefixed_key("t", &long));
    assert!(prefixed_key("s", "a\nb").starts_with("s:sha256:"));
    // Exactly at the limit stays plain.
    let edge = "y".repeat(253);
    assert_eq!(prefixed_key("s", &edge), format!("s:{edge}"));
}

#[test]
fn an_s3_url_names_a_bucket_and_a_key() {
    assert_eq!(
        load::s3_url("s3://cfg/sources/prod.json").unwrap(),
        ("cfg".to_owned(), "sources/prod.json".to_owned())
    );
    for bad in ["s3://", "s3://b", "s3://b/", "s3:///k", "https://b/k"] {
        assert_eq!(load::s3_url(bad).unwrap_err().var, "SOURCES", "{bad}");
    }
}
