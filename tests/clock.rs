//! Deadlines in S3's time, not the machine's (docs/protocol.md): a
//! writer learns S3's clock from the `Date` of its answers, judges the finish
//! deadline by it on the safe side of its uncertainty, and writes nothing
//! bound by a deadline when the offset is unknown or over 60 s. The store's
//! clock is set minutes ahead of and behind the machine's with
//! `MemoryStore::set_skew`.

use crate::common;

use std::sync::Arc;

use crate::common::World;
use chrono::Duration;
use idempotent_submit::lambda::handle_submit;
use idempotent_submit::store::{Fault, Op};
use idempotent_submit::testing::protocol::{RecordOutcome, SweepOptions, SweepSummary};
use idempotent_submit::{Clock, Queue, Store, SubmitError};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{Value, json};

impl World {
    /// A scheduled pass, straight on the bucket, with the default options.
    async fn scheduled_pass(&self) -> Result<SweepSummary, SubmitError> {
        self.queue().engine().sweep(&SweepOptions::default()).await
    }

    /// A submit of `key` whose process died right after writing its record.
    async fn died_after_its_record(&self, key: &str) {
        self.interrupted_after_its_record(key, json!({"n": 1}))
            .await;
        assert_eq!(self.count("idempotency/"), 1);
        assert_eq!(self.count("tasks/"), 0);
    }

    /// A submit of `key` whose process died right after writing its task:
    /// the record and the task are there, the marker is not.
    async fn interrupted_before_the_marker(&self, key: &str) {
        self.submit_dying_at(
            key,
            json!({"n": 1}),
            Op::Put,
            "ready/",
            Fault::Fail(idempotent_submit::StoreError::Fatal(
                "the process died".into(),
            )),
        )
        .await;
        assert_eq!(
            (
                self.count("idempotency/"),
                self.count("tasks/"),
                self.count("ready/")
            ),
            (1, 1, 0)
        );
    }

    /// A queue whose first task write stalls `by` (the clock moves on) and
    /// fails retryably; its operation timeout is a library user's long one,
    /// so that the finish deadline, not the operation's, stops the retry.
    fn queue_stalling_the_first_task_write(&self, by: Duration) -> Queue {
        use std::sync::atomic::{AtomicBool, Ordering};
        let clock = self.clock.clone();
        let stalled = Arc::new(AtomicBool::new(false));
        let store = common::Wrapped(common::Intercept {
            inner: self.bucket.clone(),
            hook: move |op: Op, key: &str| {
                if op == Op::PutCreate
                    && key.starts_with("tasks/")
                    && !stalled.swap(true, Ordering::SeqCst)
                {
                    clock.advance(by);
                    return Some(idempotent_submit::StoreError::Unavailable("stalled".into()));
                }
                None
            },
        });
        let settings = idempotent_submit::Settings {
            operation_timeout: Duration::hours(2),
            ..common::settings()
        };
        Queue::with_clock(store, Arc::new(self.clock.clone()), settings)
    }

    /// Another machine, whose clock stands `skew` from S3's, asks at S3's
    /// time `at` (S3's clock runs on; the machine's is set to match).
    fn machine_at(&self, skew: Duration, at: chrono::DateTime<chrono::Utc>) {
        self.bucket.set_skew(skew);
        self.clock.set(at - skew);
    }
}

async fn submit(q: &Queue, key: &str) -> Result<idempotent_submit::Submitted, SubmitError> {
    q.submit("t", json!({"n": 1})).idempotency_key(key).await
}

fn clock_error(e: &SubmitError) -> bool {
    matches!(e, SubmitError::ClockOffset { offset: Some(_) })
}

#[tokio::test]
async fn a_clock_minutes_ahead_or_behind_writes_no_task_and_answers_retryable() {
    for minutes in [-5, 5] {
        let w = World::skewed(Duration::minutes(minutes));
        let q = w.queue();
        // The first answer (the record's PUT) tells S3's clock: the record
        // stands (its time is S3's own), nothing bound by the deadline
        // follows it.
        let e = submit(&q, "k1").await.unwrap_err();
        assert!(clock_error(&e), "{minutes} min: {e:?}");
        assert!(e.is_retryable());
        assert_eq!(e.code(), "storage_unavailable");
        assert_eq!(e.retry_after(), Some(std::time::Duration::from_secs(30)));
        assert!(e.to_string().contains("over the 60 s allowed"), "{e}");
        assert_eq!(
            (
                w.count("idempotency/"),
                w.count("tasks/"),
                w.count("ready/")
            ),
            (1, 0, 0)
        );
        // With the offset known, a new submit writes nothing at all, and a
        // replay of the first key writes nothing either.
        let before = w.bucket.snapshot();
        assert!(clock_error(&submit(&q, "k2").await.unwrap_err()));
        assert!(clock_error(&submit(&q, "k1").await.unwrap_err()));
        assert_eq!(w.bucket.snapshot(), before, "{minutes} min");
        // The clock fixed, the retry finishes the submit: one task.
        w.bucket.set_skew(Duration::zero());
        let r = submit(&q, "k1").await.unwrap();
        assert!(r.replayed && r.recovered);
        assert_eq!((w.count("tasks/"), w.count("ready/")), (1, 1));
    }
}

#[tokio::test]
async fn within_60_s_a_deadline_passed_by_s3s_clock_is_passed_though_ours_is_short_of_it() {
    // S3 is 50 s ahead: by our clock the deadline is 40 s away, by S3's it
    // passed 10 s ago. No task is written for the record.
    let w = World::skewed(Duration::seconds(50));
    w.died_after_its_record("k").await;
    w.clock.advance(Duration::seconds(2400 + 10));
    let before = w.bucket.snapshot();
    match submit(&w.queue(), "k").await.unwrap_err() {
        SubmitError::Undetermined { retry_after, .. } => {
            // Until 15 minutes after the deadline by S3's earliest time.
            assert_eq!(retry_after.as_secs(), 15 * 60 - 10);
        }
        other => panic!("expected undetermined, got {other:?}"),
    }
    assert_eq!(w.bucket.snapshot(), before);
    // The sweeper, too, leaves it as it is.
    let rkey = w.keys("idempotency/")[0].clone();
    let outcome = w.queue().engine().sweep_record(&rkey, false, None).await;
    assert!(
        matches!(outcome, RecordOutcome::PastDeadline),
        "{outcome:?}"
    );
    assert_eq!(w.bucket.snapshot(), before);
}

/// S3 is 50 s behind: a submit of `k` that died after its record (or, with
/// `marker_only`, with only its marker missing), then the next submit when
/// by our clock the deadline passed 10 s ago and by S3's it is 40 s away. It
/// is answered, and both objects are there.
async fn next_submit_by_s3s_deadline(marker_only: bool) -> idempotent_submit::Submitted {
    let w = World::skewed(Duration::seconds(-50));
    if marker_only {
        w.interrupted_before_the_marker("k").await;
    } else {
        w.died_after_its_record("k").await;
    }
    w.clock.advance(Duration::seconds(2400 - 40));
    let r = submit(&w.queue(), "k").await.unwrap();
    assert_eq!((w.count("tasks/"), w.count("ready/")), (1, 1));
    r
}

#[tokio::test]
async fn within_60_s_a_deadline_still_ahead_by_s3s_clock_is_still_ahead_though_ours_passed_it() {
    // The submit finishes the task.
    let r = next_submit_by_s3s_deadline(false).await;
    assert!(r.recovered);
}

#[tokio::test]
async fn a_clock_ahead_does_not_answer_missing_before_a_late_write_could_still_land() {
    // S3 is 50 s behind us. By our clock the last late write could land
    // until 20 s ago; by S3's it can for 30 s more: undetermined, not
    // `missing`.
    let w = World::skewed(Duration::seconds(-50));
    w.died_after_its_record("k").await;
    w.clock.advance(Duration::seconds(2400 + 15 * 60 - 30));
    match submit(&w.queue(), "k").await.unwrap_err() {
        SubmitError::Undetermined { retry_after, .. } => assert_eq!(retry_after.as_secs(), 30),
        other => panic!("expected undetermined, got {other:?}"),
    }
    // Once S3's earliest time is past it, `missing`.
    w.clock.advance(Duration::seconds(30));
    let r = submit(&w.queue(), "k").await.unwrap();
    assert_eq!(r.status, "missing");
    assert_eq!(w.count("tasks/"), 0);
}

#[tokio::test]
async fn a_sweeper_whose_clock_is_off_leaves_records_and_its_checkpoint_alone() {
    let w = World::skewed(Duration::zero());
    w.died_after_its_record("k").await;
    w.clock.advance(Duration::seconds(600));
    w.bucket.set_skew(Duration::minutes(-3));
    let rkey = w.keys("idempotency/")[0].clone();
    let before = w.bucket.snapshot();
    let outcome = w.queue().engine().sweep_record(&rkey, false, None).await;
    match outcome {
        RecordOutcome::Failed(e) => assert!(clock_error(&e), "{e:?}"),
        other => panic!("expected a failure to retry, got {other:?}"),
    }
    // The scheduled pass reads its checkpoint, learns the clock, and stops
    // before writing one.
    let e = w.scheduled_pass().await.unwrap_err();
    assert!(clock_error(&e), "{e:?}");
    assert_eq!(w.bucket.snapshot(), before);
    // Fixed, the same event finishes it: its task and marker written, the
    // record left as it was.
    w.bucket.set_skew(Duration::zero());
    let outcome = w.queue().engine().sweep_record(&rkey, false, None).await;
    assert!(matches!(outcome, RecordOutcome::Finished), "{outcome:?}");
    assert_eq!((w.count("tasks/"), w.count("ready/")), (1, 1));
    let record = |snap: &[(String, bytes::Bytes, idempotent_submit::store::ETag, _)]| {
        snap.iter()
            .find(|(k, ..)| *k == rkey)
            .map(|(_, b, e, _)| (b.clone(), e.clone()))
    };
    assert_eq!(record(&w.bucket.snapshot()), record(&before));
}

#[tokio::test]
async fn the_http_answer_to_a_clock_off_is_a_503_with_retry_after_and_no_detail_of_it() {
    let w = World::skewed(Duration::minutes(10));
    let app = common::lambda::app(w.queue(), false);
    let event = common::event("http-v2-post.json");
    let out = handle_submit(&app, LambdaEvent::new(event.clone(), Context::default()))
        .await
        .unwrap();
    common::openapi::check(&event, &out);
    assert_eq!(out["statusCode"], 503, "{out}");
    assert_eq!(out["headers"]["retry-after"], "30");
    let body: Value = serde_json::from_str(out["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["code"], "storage_unavailable");
    assert_eq!(w.count("tasks/"), 0);
    assert_eq!(app.metrics.lines()[0]["StorageError"], 1);
}

#[tokio::test]
async fn a_stalled_first_submit_keeps_the_deadline_of_its_records_s3_time() {
    // S3 is 50 s ahead: the record's LastModified is our send time + 50 s,
    // and its deadline 50 s later than our clock's send time would say. A
    // submit stalled between its record and its task (the first task write
    // fails after 2350 s) may still write it; 2420 s is past.
    for (stall, written) in [(2350, true), (2420, false)] {
        let w = World::skewed(Duration::seconds(50));
        let q = w.queue_stalling_the_first_task_write(Duration::seconds(stall));
        let r = submit(&q, "k").await;
        assert_eq!(r.is_ok(), written, "stall {stall} s: {r:?}");
        assert_eq!(w.count("tasks/"), usize::from(written), "stall {stall} s");
        if !written {
            assert!(matches!(r, Err(SubmitError::Undetermined { .. })), "{r:?}");
        }
    }
}

#[tokio::test]
async fn the_scheduled_pass_is_timed_in_s3s_clock() {
    // S3 is 50 s behind: the pass's instant, which the next pass's window
    // starts from and every record's age is judged against, is S3's.
    let w = World::skewed(Duration::seconds(-50));
    let local = w.clock.now();
    let s = w.scheduled_pass().await.unwrap();
    assert!(s.complete);
    let cp: Value = serde_json::from_slice(
        &w.bucket
            .get(idempotent_submit::testing::protocol::sweep::CHECKPOINT_KEY)
            .await
            .unwrap()
            .body,
    )
    .unwrap();
    let pass: chrono::DateTime<chrono::Utc> = cp["pass"].as_str().unwrap().parse().unwrap();
    assert_eq!(pass, local - Duration::seconds(50), "{cp}");
}

#[tokio::test]
async fn a_replay_that_finds_the_task_but_not_its_marker_answers_nothing_with_a_clock_off() {
    // A 200 needs both objects; with S3's clock 5 minutes off, the marker may
    // not be written, so the replay is a retryable error, not the task's
    // status.
    let w = World::skewed(Duration::zero());
    w.interrupted_before_the_marker("k").await;
    w.bucket.set_skew(Duration::minutes(5));
    let before = w.bucket.snapshot();
    let e = submit(&w.queue(), "k").await.unwrap_err();
    assert!(clock_error(&e), "{e:?}");
    assert_eq!(w.bucket.snapshot(), before);
}

#[tokio::test]
async fn a_missing_marker_alone_is_written_by_s3s_deadline_not_ours() {
    // Only the marker is missing, and it is written.
    let r = next_submit_by_s3s_deadline(true).await;
    assert!(r.recovered && r.replayed, "{r:?}");
}

#[tokio::test]
async fn a_write_refused_at_the_deadline_waits_out_the_late_writes_by_s3s_earliest_time() {
    // S3 is 50 s ahead. A replay starts in time, but its task write stalls
    // 200 s and the retry finds S3's deadline passed: undetermined until 15
    // minutes after the deadline, counted from S3's earliest time now.
    let w = World::skewed(Duration::seconds(50));
    w.died_after_its_record("k").await;
    w.clock.advance(Duration::seconds(2300));
    let q = w.queue_stalling_the_first_task_write(Duration::seconds(200));
    match submit(&q, "k").await.unwrap_err() {
        // The record's deadline is S3's t0 + 50 + 2400; now is our t0 + 2500,
        // S3's t0 + 2550: 900 - 100 s are left.
        SubmitError::Undetermined { retry_after, .. } => assert_eq!(retry_after.as_secs(), 800),
        other => panic!("expected undetermined, got {other:?}"),
    }
    assert_eq!(w.count("tasks/"), 0);
}

#[tokio::test]
async fn within_60_s_a_records_life_is_judged_by_s3s_clock_whichever_machine_wrote_or_reads_it() {
    for (writer, reader) in [(-50, 50), (50, -50), (-50, -50), (50, 50), (0, 50)] {
        let (writer, reader) = (Duration::seconds(writer), Duration::seconds(reader));
        let w = World::skewed(writer);
        let q = w.queue();
        let ttl = Duration::hours(1);
        // A process that has had an answer from S3 (a cold one writes its
        // first record by its own clock: it has nothing else to go by).
        submit(&q, "warm").await.unwrap();
        let first = q
            .submit("t", json!({"n": 1}))
            .idempotency_key("k")
            .idempotency_ttl(ttl)
            .await
            .unwrap();
        assert!(first.created());
        // Written in S3's time: the life runs from the record's LastModified.
        let (rec, meta) = q.record("t", "k", None).await.unwrap().unwrap();
        assert_eq!(
            (rec.created_at, rec.expires_at),
            (meta.last_modified, meta.last_modified + ttl),
            "writer {writer}"
        );
        // 20 s before that by S3's clock, a machine whose clock is off (it
        // may think the record long expired) still replays it...
        let again = |n| {
            let q = w.queue();
            async move {
                q.submit("t", json!({"n": n}))
                    .idempotency_key("k")
                    .idempotency_ttl(ttl)
                    .await
                    .unwrap()
            }
        };
        w.machine_at(reader, rec.expires_at - Duration::seconds(20));
        let replay = again(1).await;
        assert_eq!(
            (replay.task_id, replay.replayed),
            (first.task_id, true),
            "writer {writer}, reader {reader}"
        );
        // ...and at it (though its clock may say it has 50 s to go), takes
        // the key for a new task.
        w.machine_at(reader, rec.expires_at);
        let next = again(2).await;
        assert!(next.created(), "writer {writer}, reader {reader}");
        assert_ne!(next.task_id, first.task_id);
    }
}

#[tokio::test]
async fn the_sweepers_event_judges_a_records_expiry_by_s3s_clock() {
    // S3 50 s ahead: expired by S3's clock 10 s ago, 40 s ahead by ours:
    // deleted. S3 50 s behind: 10 s to go by S3's clock, expired 40 s ago by
    // ours: kept.
    for (skew, past_expiry, deleted) in [(50, 10, true), (-50, -10, false)] {
        let skew = Duration::seconds(skew);
        let w = World::skewed(skew);
        let q = w.queue();
        submit(&q, "warm").await.unwrap();
        q.submit("t", json!({"n": 1}))
            .idempotency_key("k")
            .idempotency_ttl(Duration::hours(1))
            .await
            .unwrap();
        let (rec, meta) = q.record("t", "k", None).await.unwrap().unwrap();
        w.machine_at(skew, rec.expires_at + Duration::seconds(past_expiry));
        let outcome = w
            .queue()
            .engine()
            .sweep_record(&meta.key, false, None)
            .await;
        assert_eq!(
            matches!(outcome, RecordOutcome::ExpiredDeleted),
            deleted,
            "S3 {skew} off: {outcome:?}"
        );
        assert_eq!(q.record("t", "k", None).await.unwrap().is_some(), !deleted);
    }
}

#[tokio::test]
async fn a_keyless_delay_counts_from_s3s_time_once_the_queue_has_heard_it() {
    // S3 is 50 s ahead. A keyless submit has no record whose time it could
    // take: once the queue has heard S3's clock (from a first submit's
    // answers), a delay counts from S3's earliest time, not the machine's,
    // as a keyed one counts from its record's.
    let w = World::skewed(Duration::seconds(50));
    let q = w.queue();
    q.submit("t", json!(1)).await.unwrap();
    let s = q
        .submit("t", json!(2))
        .delay(Duration::seconds(600))
        .await
        .unwrap();
    let task: Value =
        serde_json::from_slice(&w.bucket.get(&s.task_key).await.unwrap().body).unwrap();
    let available: chrono::DateTime<chrono::Utc> =
        task["available_at"].as_str().unwrap().parse().unwrap();
    let ahead = available - (w.clock.now() + Duration::seconds(600));
    // S3's time is known to within a second (its Date has whole seconds).
    assert!(
        ahead >= Duration::seconds(49) && ahead <= Duration::seconds(50),
        "{ahead:?}"
    );
}
