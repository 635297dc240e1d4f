//! The one place where S3's status codes become the protocol's outcomes
//! (`src/store/s3.rs`), tested against a stub server that answers every
//! request with a chosen status and S3 error code, through the real SDK
//! client. Each quirk the adapter names is here: 412 is an answer, 409 is
//! contention, 404 on If-Match means gone, 404 `NoSuchBucket` is not "no
//! such object", a 403 for a request signed too long ago can be retried,
//! throttling (503 and 429 `SlowDown`) is retryable, a 304 to a conditional
//! GET is "not modified". The stub also records
//! each request, so the conditional headers are checked on the wire.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use idempotent_submit::store::{ETag, PutMode, S3Store, Store, StoreError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the stub answers: a status, and an S3 error code (none: no body,
/// as for HEAD); or `None`: it closes the connection without an answer.
type Answer = Option<(u16, Option<&'static str>)>;

/// One request as the stub saw it: the request line and its headers,
/// lowercased.
type Seen = Arc<Mutex<Vec<String>>>;

async fn stub(answer: Answer) -> (S3Store, Seen) {
    stub_dated(answer, None).await
}

/// The stub, its answers dated `date` (an HTTP date) when given.
async fn stub_dated(answer: Answer, date: Option<String>) -> (S3Store, Seen) {
    stub_with(
        answer,
        date.map_or(String::new(), |d| format!("Date: {d}\r\n")),
    )
    .await
}

/// The stub, its answers carrying `headers` (each line ending in CRLF).
async fn stub_with(answer: Answer, headers: String) -> (S3Store, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = listener.accept().await {
            let log = log.clone();
            let date = headers.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 8192];
                // The head, then as much body as it announces.
                let head_end = loop {
                    let n = c.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while buf.len() < head_end + length {
                    let n = c.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                log.lock().unwrap().push(head.clone());
                let Some((status, code)) = answer else {
                    return; // dropped: no answer at all
                };
                let body = code.map_or(String::new(), |code| {
                    format!(
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>stub says {code}</Message><RequestId>stub</RequestId></Error>"
                    )
                });
                let body = if head.starts_with("head ") {
                    String::new()
                } else {
                    body
                };
                let reply = format!(
                    "HTTP/1.1 {status} Stub\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n{date}x-amz-request-id: stub\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = c.write_all(reply.as_bytes()).await;
                let _ = c.shutdown().await;
            });
        }
    });
    (
        S3Store::for_endpoint(&format!("http://{addr}"), "bucket"),
        seen,
    )
}

/// Every call the protocol makes, answered with `answer`.
async fn outcomes(answer: Answer) -> Vec<(&'static str, StoreError)> {
    let (s, _) = stub(answer).await;
    let etag = ETag("\"abc\"".into());
    let err = |what: &'static str, r: Result<(), StoreError>| match r {
        Ok(()) => panic!("{what} succeeded against {answer:?}"),
        Err(e) => (what, e),
    };
    vec![
        err("get", s.get("k").await.map(drop)),
        err("head", s.head("k").await.map(drop)),
        err(
            "put create",
            s.put("k", Bytes::from_static(b"{}"), PutMode::Create)
                .await
                .map(drop),
        ),
        err(
            "put update",
            s.put(
                "k",
                Bytes::from_static(b"{}"),
                PutMode::Update(etag.clone()),
            )
            .await
            .map(drop),
        ),
        err(
            "put",
            s.put("k", Bytes::from_static(b"{}"), PutMode::Overwrite)
                .await
                .map(drop),
        ),
        err("delete if-match", s.delete("k", Some(&etag)).await),
        err("list", s.list("p/", None, None, 10).await.map(drop)),
    ]
}

/// Every call got `expected`. HEAD is left out: S3 answers it without a
/// body, so its error code cannot be read (see
/// `a_bodiless_error_to_head_is_judged_by_its_status_alone`).
async fn all_become(answer: Answer, expected: fn(&StoreError) -> bool, name: &str) {
    for (what, e) in outcomes(answer).await {
        if what == "head" {
            continue;
        }
        assert!(
            expected(&e),
            "{what} against {answer:?}: {e:?}, expected {name}"
        );
    }
}

#[tokio::test]
async fn a_412_is_precondition_failed_on_every_conditional_call() {
    let got = outcomes(Some((412, Some("PreconditionFailed")))).await;
    for (what, e) in got {
        if matches!(what, "put create" | "put update" | "delete if-match") {
            assert_eq!(e, StoreError::PreconditionFailed, "{what}");
        }
    }
}

#[tokio::test]
async fn a_409_conditional_request_conflict_is_contention_to_retry() {
    for (what, e) in outcomes(Some((409, Some("ConditionalRequestConflict")))).await {
        assert_eq!(e, StoreError::Conflict, "{what}");
        assert!(e.is_retryable());
    }
}

#[tokio::test]
async fn a_404_no_such_key_is_not_found_and_on_if_match_means_gone() {
    for (what, e) in outcomes(Some((404, Some("NoSuchKey")))).await {
        assert_eq!(e, StoreError::NotFound, "{what}");
    }
}

#[tokio::test]
async fn a_bodiless_404_to_head_is_not_found() {
    let (s, _) = stub(Some((404, None))).await;
    assert_eq!(s.head("k").await.unwrap_err(), StoreError::NotFound);
}

#[tokio::test]
async fn a_bodiless_error_to_head_is_judged_by_its_status_alone() {
    // Throttling and server errors are retryable whatever their code.
    for status in [503, 500, 429] {
        let (s, _) = stub(Some((status, Some("SlowDown")))).await;
        let e = s.head("k").await.unwrap_err();
        assert!(matches!(e, StoreError::Unavailable(_)), "{status}: {e:?}");
    }
    // A 403 without its code cannot be told from AccessDenied: it is not
    // retried blindly. (The task GET that runs beside a marker HEAD carries
    // the code, and is judged first.)
    let (s, _) = stub(Some((403, Some("RequestTimeTooSkewed")))).await;
    assert!(matches!(
        s.head("k").await.unwrap_err(),
        StoreError::Fatal(_)
    ));
}

#[tokio::test]
async fn a_404_no_such_bucket_is_fatal_not_a_missing_object() {
    let (s, _) = stub(Some((404, Some("NoSuchBucket")))).await;
    for (what, r) in [
        ("get", s.get("k").await.map(drop)),
        (
            "put create",
            s.put("k", Bytes::new(), PutMode::Create).await.map(drop),
        ),
        ("list", s.list("p/", None, None, 10).await.map(drop)),
    ] {
        let e = r.unwrap_err();
        assert!(matches!(e, StoreError::Fatal(_)), "{what}: {e:?}");
        assert!(!e.is_retryable());
    }
}

#[tokio::test]
async fn throttling_and_server_errors_are_retryable() {
    for answer in [
        (503, "SlowDown"),
        (429, "SlowDown"),
        (500, "InternalError"),
        (503, "ServiceUnavailable"),
        (400, "RequestTimeout"),
    ] {
        all_become(
            Some((answer.0, Some(answer.1))),
            |e| matches!(e, StoreError::Unavailable(_)) && e.is_retryable(),
            "Unavailable",
        )
        .await;
    }
}

#[tokio::test]
async fn a_403_for_a_request_signed_too_long_ago_is_retryable() {
    for code in ["RequestTimeTooSkewed", "RequestExpired"] {
        all_become(
            Some((403, Some(code))),
            |e| matches!(e, StoreError::Unavailable(_)),
            "Unavailable",
        )
        .await;
    }
}

#[tokio::test]
async fn other_refusals_are_fatal() {
    for answer in [
        (403, "AccessDenied"),
        (400, "InvalidArgument"),
        (400, "InvalidRequest"),
    ] {
        all_become(
            Some((answer.0, Some(answer.1))),
            |e| matches!(e, StoreError::Fatal(_)) && !e.is_retryable(),
            "Fatal",
        )
        .await;
    }
}

#[tokio::test]
async fn a_connection_closed_without_an_answer_is_retryable() {
    all_become(
        None,
        |e| matches!(e, StoreError::Unavailable(_)),
        "Unavailable",
    )
    .await;
}

#[tokio::test]
async fn conditional_writes_send_their_conditions() {
    let (s, seen) = stub(Some((412, Some("PreconditionFailed")))).await;
    let _ = s.put("a", Bytes::new(), PutMode::Create).await;
    let _ = s
        .put("b", Bytes::new(), PutMode::Update(ETag("\"e1\"".into())))
        .await;
    let _ = s.put("c", Bytes::new(), PutMode::Overwrite).await;
    let _ = s.delete("d", Some(&ETag("\"e2\"".into()))).await;
    assert_eq!(s.bucket(), "bucket");
    let seen = seen.lock().unwrap().clone();
    let find = |key: &str| {
        seen.iter()
            .find(|h| {
                h.lines().next().is_some_and(|l| {
                    l.contains(&format!("/bucket/{key} ")) || l.contains(&format!("/bucket/{key}?"))
                })
            })
            .unwrap_or_else(|| panic!("no request for {key}: {seen:#?}"))
            .clone()
    };
    assert!(find("a").contains("if-none-match: *"));
    assert!(find("b").contains("if-match: \"e1\""));
    let c = find("c");
    assert!(
        !c.contains("if-match") && !c.contains("if-none-match"),
        "{c}"
    );
    assert!(find("d").starts_with("delete ") && find("d").contains("if-match: \"e2\""));
}

/// A cache's revalidation: S3 answers a GET with `If-None-Match: <etag>`
/// 304 and no body while the object still has that ETag; the SDK has no
/// output for it, and the adapter maps its status to `NotModified`, once.
#[tokio::test]
async fn a_bodiless_304_to_a_conditional_get_is_not_modified_and_the_etag_is_sent() {
    let (s, seen) = stub(Some((304, None))).await;
    let e = s
        .get_if_none_match("schemas/t.json", &ETag("\"e3\"".into()))
        .await
        .err();
    assert_eq!(e, Some(StoreError::NotModified));
    assert!(
        !StoreError::NotModified.is_retryable(),
        "an answer, not a failure"
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "one request, not retried: {seen:#?}");
    assert!(seen[0].starts_with("get ") && seen[0].contains("if-none-match: \"e3\""));
    // A plain GET never sends the condition.
    let (s, seen) = stub(Some((404, Some("NoSuchKey")))).await;
    assert_eq!(s.get("k").await.err(), Some(StoreError::NotFound));
    assert!(!seen.lock().unwrap()[0].contains("if-none-match"));
}

#[tokio::test]
async fn every_answer_errors_included_dates_s3s_clock_for_the_store() {
    for minutes in [-5i64, 0, 7] {
        let s3_now = chrono::Utc::now() + chrono::Duration::minutes(minutes);
        let date = s3_now.format("%a, %d %b %Y %H:%M:%S GMT").to_string();
        // A 412: the answer most conditional writes get.
        let (store, _) = stub_dated(Some((412, Some("PreconditionFailed"))), Some(date)).await;
        assert_eq!(
            store.clock_offset(),
            None,
            "unknown before the first answer"
        );
        let e = store
            .put("k", Bytes::from_static(b"x"), PutMode::Create)
            .await
            .unwrap_err();
        assert_eq!(e, StoreError::PreconditionFailed);
        let o = store
            .clock_offset()
            .expect("learned from the answer's Date");
        let want = chrono::Duration::minutes(minutes);
        // Within the Date's one-second resolution and the round trip.
        assert!(
            o.low <= want + chrono::Duration::milliseconds(10)
                && want - chrono::Duration::seconds(2) <= o.low,
            "{minutes} min: {o}"
        );
        assert!(o.high - o.low <= chrono::Duration::seconds(2), "{o}");
    }
    // No Date, no knowledge.
    let (store, _) = stub(Some((200, None))).await;
    let _ = store.head("k").await;
    assert_eq!(store.clock_offset(), None);
}

/// S3 always sends `ETag` and `Last-Modified`; an answer cut short by
/// something on the way is a retryable error, never an empty ETag (which no
/// compare-and-swap could match) or a `LastModified` of 1970 (which would
/// make a young record look settled, and a replay answer `missing` while a
/// write may still land).
#[tokio::test]
async fn an_answer_without_its_etag_or_last_modified_is_retryable_never_made_up() {
    let (bare, _) = stub(Some((200, None))).await;
    let (dated_only, _) = stub_with(Some((200, None)), "ETag: \"abc\"\r\n".into()).await;
    for (store, missing) in [(&bare, "ETag"), (&dated_only, "Last-Modified")] {
        for (what, r) in [
            ("head", store.head("k").await.map(|_| ())),
            ("get", store.get("k").await.map(|_| ())),
        ] {
            match r {
                Err(e @ StoreError::Unavailable(_)) => {
                    assert!(e.is_retryable());
                    assert!(e.to_string().contains(missing), "{what}: {e}");
                }
                other => panic!("{what} without {missing}: {other:?}"),
            }
        }
    }
    let put = bare
        .put("k", Bytes::new(), PutMode::Overwrite)
        .await
        .map(|_| ());
    assert!(
        matches!(&put, Err(StoreError::Unavailable(m)) if m.contains("ETag")),
        "{put:?}"
    );
}

/// `x-amz-version-id: null` (an object written while versioning was off or
/// suspended) and an empty one name no version that could be deleted on
/// its own; any other names its version.
#[tokio::test]
async fn a_version_id_of_null_or_empty_is_no_version_and_any_other_is_the_objects() {
    for (sent, read) in [("null", None), ("", None), ("v1", Some("v1"))] {
        let headers = format!(
            "ETag: \"abc\"\r\nLast-Modified: Wed, 21 Oct 2015 07:28:00 GMT\r\nx-amz-version-id: {sent}\r\n"
        );
        let (store, _) = stub_with(Some((200, None)), headers).await;
        let meta = store.head("k").await.unwrap();
        assert_eq!(meta.version_id.as_deref(), read, "{sent:?}");
    }
}
