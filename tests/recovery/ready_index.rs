use super::*;

// ---- the queue's workers: the ready index stays true (guarantee 10) ----

#[tokio::test]
async fn a_replay_of_a_key_whose_task_a_worker_has_claimed_writes_no_marker_and_answers_its_status()
{
    let w = World::new();
    let first = submit(&w.restarted()).await.unwrap();
    w.worker_claims().await;
    assert!(w.keys("ready/").is_empty());
    let before = w.bucket.snapshot();
    let r = submit(&w.process()).await.unwrap();
    assert_eq!(r.task_id, first.task_id);
    assert_eq!(r.status, "running");
    assert!(r.replayed && !r.recovered);
    assert_wrote_nothing(&w, &before);
    // The replay's 4 requests: PUT (412), GET record, GET task + HEAD
    // marker; the task is not the record's `pending_task` any more, so the
    // missing marker is not written.
    assert_eq!(w.faulty.calls().len(), 4);

    // Run to completion: a replay answers that, and writes nothing either.
    let (mut task, etag) = w.task("k").await;
    task["status"] = json!("completed");
    w.replace_json(&r.task_key, &task, etag).await;
    w.faulty.reset_log();
    let before = w.bucket.snapshot();
    let r = submit(&w.process()).await.unwrap();
    assert_eq!(r.status, "completed");
    assert_wrote_nothing(&w, &before);
}

#[tokio::test]
async fn the_sweepers_event_for_a_record_whose_task_a_worker_has_claimed_writes_nothing() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    let written = w.record_meta("k").await;
    w.worker_claims().await;
    let before = w.bucket.snapshot();
    assert_eq!(w.logged_sweep_event("k").await, RecordOutcome::Nothing);
    assert_wrote_nothing(&w, &before);
    // GET record, GET task + HEAD marker.
    assert_eq!(w.faulty.calls().len(), 3);
    assert!(w.keys("ready/").is_empty());
    assert_eq!(w.record_meta("k").await.1.etag, written.1.etag);
}

/// A store whose first marker PUT reaches the bucket just after a worker has
/// claimed the task (found by scanning `tasks/`, as buquet's worker does when
/// the index is empty): the claim lands between a finisher's read of the task
/// and its marker. The worker deletes the task's marker after its claim, but
/// there is none yet.
fn racing_a_worker(
    w: &World,
    task_key: &str,
    claimed_task: bytes::Bytes,
) -> FaultyStore<impl Store + Clone> {
    let bucket = w.bucket.clone();
    let task_key = task_key.to_owned();
    let fired = Arc::new(std::sync::atomic::AtomicBool::new(false));
    FaultyStore::new(common::Wrapped(common::Intercept {
        inner: w.bucket.clone(),
        hook: move |op: Op, key: &str| {
            if op == Op::Put
                && key.starts_with("ready/")
                && !fired.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                let cur = bucket.get(&task_key).now_or_never()?.ok()?;
                bucket
                    .put(
                        &task_key,
                        claimed_task.clone(),
                        PutMode::Update(cur.meta.etag),
                    )
                    .now_or_never()?
                    .ok()?;
            }
            None
        },
    }))
}

#[tokio::test]
async fn a_finisher_whose_marker_lands_after_a_worker_claimed_the_task_removes_its_marker() {
    for finisher in ["a replay", "the sweeper"] {
        let w = died_before_the_marker().await;
        let written = w.record_meta("k").await;
        let (task, _) = w.task("k").await;
        let f = racing_a_worker(&w, &written.0.task_key, claimed(&task));
        let q = Queue::with_clock(f.clone(), Arc::new(w.clock.clone()), common::settings());
        if finisher == "a replay" {
            let r = submit(&q).await.unwrap();
            assert_eq!(r.status, "running", "the status read after the marker");
        } else {
            w.clock.advance(common::settings().stale_creating_after);
            let outcome = q
                .engine()
                .sweep_record(&w.record_key("k"), false, None)
                .await;
            assert_eq!(outcome, RecordOutcome::Finished);
        }
        assert_eq!(w.task("k").await.0["status"], "running", "{finisher}");
        // Its marker landed, the task read again was no longer pending, and
        // the marker went: no marker names a task that cannot be claimed.
        assert!(
            w.keys("ready/").is_empty(),
            "{finisher}: {:?}",
            w.keys("ready/")
        );
        let writes = queue_writes(&f);
        assert_eq!(writes.len(), 2, "{finisher}: {writes:?}");
        assert_eq!((writes[0].0, writes[1].0), (Op::Put, Op::Delete));
        assert_eq!(writes[0].1, writes[1].1, "{finisher}: {writes:?}");
        let (rec, meta) = w.record_meta("k").await;
        assert_eq!(rec.status, Some(RecordStatus::Creating));
        assert_eq!(
            meta.etag, written.1.etag,
            "{finisher}: the record as written"
        );
    }
}

#[tokio::test]
async fn a_retried_task_gets_no_marker_of_ours_in_its_old_minute() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    let first = w.keys("ready/");
    w.worker_claims().await;
    let retried = w.worker_retries().await;
    assert_eq!(first.len(), 1);
    assert_ne!(first[0], retried, "another minute");
    let before = w.bucket.snapshot();
    let r = submit(&w.process()).await.unwrap();
    assert_eq!(r.status, "pending");
    assert_eq!(w.keys("ready/"), std::slice::from_ref(&retried));
    assert_eq!(w.logged_sweep_event("k").await, RecordOutcome::Nothing);
    assert_eq!(w.keys("ready/"), [retried]);
    assert_wrote_nothing(&w, &before);
}

#[tokio::test]
async fn a_marker_left_for_a_task_a_worker_has_claimed_is_removed_by_the_next_finisher() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    let marker = w.keys("ready/").pop().unwrap();
    w.worker_claims().await;
    // Left by an earlier version of this service, which wrote a marker
    // whenever its HEAD found none, or by a finisher that died before it
    // read the task again.
    put_marker(&w, &marker).await;
    let r = submit(&w.process()).await.unwrap();
    assert_eq!(r.status, "running");
    assert!(w.keys("ready/").is_empty());
    assert_eq!(queue_writes(&w.faulty), [(Op::Delete, marker)]);
}

/// A bucket where a worker claims the task the moment it lands (found by
/// scanning `tasks/`), and the first marker PUT waits for that claim, then
/// is answered `late` after the task's: the marker lands beside a task
/// already taken. (The in-memory store answers at once, so the wait is what
/// orders them.)
#[derive(Clone)]
struct ClaimBeforeMarker {
    bucket: idempotent_submit::store::MemoryStore,
    clock: idempotent_submit::ManualClock,
    late: Duration,
    claimed: Arc<tokio::sync::Notify>,
    waited: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait::async_trait]
impl common::Hooks for ClaimBeforeMarker {
    type Inner = idempotent_submit::store::MemoryStore;

    fn inner(&self) -> &idempotent_submit::store::MemoryStore {
        &self.bucket
    }

    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        if call.op == Op::Put
            && call.key.starts_with("ready/")
            && !self.waited.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            self.claimed.notified().await;
            self.clock.advance(self.late);
        }
        Ok(())
    }

    async fn after(&self, call: &common::Call<'_>, ok: bool) {
        if call.op == Op::PutCreate && call.key.starts_with("tasks/") && ok {
            let cur = self.bucket.get(call.key).await.unwrap();
            let task: Value = serde_json::from_slice(&cur.body).unwrap();
            self.bucket
                .put(call.key, claimed(&task), PutMode::Update(cur.meta.etag))
                .await
                .unwrap();
            // A permit kept if the marker has not asked yet.
            self.claimed.notify_one();
        }
    }
}

fn marker_held_past_a_claim(w: &World, late: Duration) -> FaultyStore<impl Store + Clone> {
    FaultyStore::new(common::Wrapped(ClaimBeforeMarker {
        bucket: w.bucket.clone(),
        clock: w.clock.clone(),
        late,
        claimed: Arc::default(),
        waited: Arc::default(),
    }))
}

/// A submit through `f` whose marker was answered after a worker claimed
/// its task: its answer `r` is the status it read after the marker
/// (`running`), and of its `calls` requests the last two were that GET of
/// the task and the DELETE of its marker, which is gone.
fn assert_marker_checked_and_removed(
    w: &World,
    f: &FaultyStore<impl Store + Clone>,
    r: &idempotent_submit::Submitted,
    calls: usize,
) {
    assert_eq!(r.status, "running", "the status read after the marker");
    assert!(w.keys("ready/").is_empty(), "{:?}", w.keys("ready/"));
    let ops: Vec<Op> = f.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops.len(), calls, "{ops:?}");
    assert_eq!(ops[calls - 2..], [Op::Get, Op::Delete], "{ops:?}");
}

#[tokio::test]
async fn a_first_submits_marker_answered_late_beside_its_task_is_checked_and_removed_after_a_claim()
{
    let w = World::new();
    let f = marker_held_past_a_claim(&w, Duration::seconds(1));
    let r = submit(&w.queue_over(f.clone())).await.unwrap();
    assert!(!r.replayed);
    assert_eq!(
        w.task("k").await.0["status"],
        "running",
        "the worker's claim"
    );
    // The marker came a second after the task: one GET of the task, which
    // the worker has taken, and the marker goes.
    assert_marker_checked_and_removed(&w, &f, &r, 5);
}

#[tokio::test]
async fn a_first_submits_marker_answered_with_its_task_is_not_read_again_and_a_claim_between_is_left_to_the_records_event()
 {
    let w = World::new();
    let f = marker_held_past_a_claim(&w, Duration::zero());
    let r = submit(&w.queue_over(f.clone())).await.unwrap();
    // Both answered at once: the first submit's three requests, nothing
    // more (what docs/protocol.md leaves open). The claim slipped in between
    // all the same, so the marker is stale.
    assert_eq!(f.calls().len(), 3);
    assert_eq!(r.status, "pending");
    let marker = w.keys("ready/");
    assert_eq!(marker.len(), 1);
    assert_eq!(w.task("k").await.0["status"], "running");
    // The record's event removes it, as any finisher's check does.
    assert_eq!(w.sweep_event("k").await, RecordOutcome::Nothing);
    assert!(w.keys("ready/").is_empty());
}

#[tokio::test]
async fn a_keyless_submits_marker_answered_late_beside_a_claim_is_checked_and_removed() {
    // Without a record no sweeper looks at the task again: the submit's
    // own re-read is the only one.
    let w = World::new();
    let f = marker_held_past_a_claim(&w, Duration::seconds(1));
    let r = w
        .queue_over(f.clone())
        .submit("t", json!({"n": 1}))
        .await
        .unwrap();
    let task = w.keys("tasks/");
    assert_eq!(task.len(), 1);
    let t: Value = serde_json::from_slice(&w.bucket.get(&task[0]).await.unwrap().body).unwrap();
    assert_eq!(t["status"], "running", "the worker's claim");
    assert_marker_checked_and_removed(&w, &f, &r, 4);
}

#[tokio::test]
async fn a_keyless_submits_marker_answered_with_its_task_is_not_read_again() {
    let w = World::new();
    let f = marker_held_past_a_claim(&w, Duration::zero());
    let r = w
        .queue_over(f.clone())
        .submit("t", json!({"n": 1}))
        .await
        .unwrap();
    // Two requests, one round trip: what docs/protocol.md leaves open.
    assert_eq!(f.calls().len(), 2);
    assert_eq!(r.status, "pending");
    assert_eq!(w.count("ready/"), 1);
}

#[tokio::test]
async fn a_keyless_submits_marker_that_took_a_retry_is_checked() {
    let w = World::new();
    w.fault_once(Op::Put, "ready/", common::unavailable("503"));
    let r = w.process().submit("t", json!({"n": 1})).await.unwrap();
    // Nobody took the task: the marker stays, after one GET.
    assert_eq!(r.status, "pending");
    assert_eq!(w.count("ready/"), 1);
    let ops: Vec<Op> = w.faulty.calls().iter().map(|c| c.op).collect();
    assert_eq!(ops.iter().filter(|o| **o == Op::Get).count(), 1, "{ops:?}");
    assert!(!ops.contains(&Op::Delete), "{ops:?}");
}

/// A scheduled pass (or its dry run) at `at`: it deletes `deleted` markers
/// (a dry run: would delete) without an error, and leaves `left` in the
/// ready index.
async fn pass_at(w: &World, at: DateTime<Utc>, dry_run: bool, deleted: u64, left: &[&String]) {
    w.clock.set(at);
    let s = pass_of(w.restarted(), dry_run).await;
    assert_eq!((s.markers_deleted, s.errors), (deleted, 0), "{s:?}");
    let left: Vec<String> = left.iter().map(|m| m.to_string()).collect();
    assert_eq!(w.keys("ready/"), left);
}

/// A marker at the key `marker`, written as a client of the queue would.
async fn put_marker(w: &World, marker: &str) {
    let put = w
        .bucket
        .put(marker, bytes::Bytes::new(), PutMode::Overwrite);
    put.await.unwrap();
}

/// One scheduled pass as `q`'s process would run it.
async fn pass_of(q: Queue, dry_run: bool) -> idempotent_submit::testing::protocol::SweepSummary {
    q.engine()
        .sweep(&idempotent_submit::testing::protocol::SweepOptions {
            dry_run,
            ..Default::default()
        })
        .await
        .unwrap()
}

#[tokio::test]
async fn a_marker_that_lands_after_every_finisher_is_removed_by_the_pass_once_it_has_stood_for_the_late_write_margin()
 {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    let written = w.record_meta("k").await;
    let marker = w.keys("ready/").pop().unwrap();
    // Its event and a first pass in its finish window: all there, untouched.
    assert_eq!(w.sweep_event("k").await, RecordOutcome::Nothing);
    assert_eq!(pass_of(w.restarted(), false).await.reads, 1);
    w.worker_claims().await;
    // A marker PUT given up on by its client lands later, after the claim:
    // S3 may apply a request up to 15 minutes after it was sent.
    w.clock.advance(Duration::minutes(5));
    put_marker(&w, &marker).await;
    let landed = w.clock.now();
    // Until it has stood for the late-write margin (15 minutes), no pass
    // judges it.
    pass_at(&w, landed + Duration::minutes(14), false, 0, &[&marker]).await;
    // Then the pass whose window its age crosses reads its task and removes
    // it. A dry run reads the same and removes nothing.
    pass_at(&w, landed + Duration::minutes(16), true, 1, &[&marker]).await;
    let s = pass_of(w.restarted(), false).await;
    assert_eq!(
        (s.markers_deleted, s.errors, s.finished),
        (1, 0, 0),
        "{s:?}"
    );
    assert!(w.keys("ready/").is_empty(), "{:?}", w.keys("ready/"));
    // The task and the record as they were; the record not read at all.
    assert_eq!(s.reads, 0, "{s:?}");
    assert_eq!(w.task("k").await.0["status"], "running");
    assert_eq!(w.record_meta("k").await.1.etag, written.1.etag);
}

#[tokio::test]
async fn a_keyless_submits_marker_that_lands_after_a_claim_is_removed_by_the_pass() {
    // No record, no due message: before the scan, nothing ever looked at
    // such a marker again (the chaos world counted them).
    let w = World::new();
    let r = w.restarted().submit("t", json!({"n": 1})).await.unwrap();
    let marker = w.keys("ready/").pop().unwrap();
    let task_key = w.keys("tasks/").pop().unwrap();
    let (task, etag) = {
        let o = w.bucket.get(&task_key).await.unwrap();
        (
            serde_json::from_slice::<Value>(&o.body).unwrap(),
            o.meta.etag,
        )
    };
    w.bucket
        .put(&task_key, claimed(&task), PutMode::Update(etag))
        .await
        .unwrap();
    // The worker deleted the marker it claimed by; a late PUT of it lands.
    w.bucket.delete(&marker, None).await.unwrap();
    w.clock.advance(Duration::minutes(1));
    put_marker(&w, &marker).await;
    w.clock.advance(Duration::minutes(16));
    let s = pass_of(w.restarted(), false).await;
    assert_eq!((s.markers_deleted, s.errors), (1, 0), "{s:?}");
    assert!(w.keys("ready/").is_empty());
    assert_eq!(
        w.keys("tasks/"),
        [task_key],
        "task {} left as it is",
        r.task_id
    );
}

#[tokio::test]
async fn a_marker_whose_task_was_never_written_goes_at_the_orphan_age_and_not_before() {
    let w = World::new();
    // A marker that landed without its task, and whose task no writer can
    // write any more once its record's finish window and late-write margin
    // have passed (from the marker's own write at the earliest).
    let id = uuid::Uuid::new_v4().hyphenated().to_string();
    let minute = w.clock.now().timestamp().div_euclid(60);
    let marker = format!("ready/{}/{minute:010}/{id}", &id[..1]);
    put_marker(&w, &marker).await;
    let landed = w.clock.now();
    // At the late-write margin: its task may still come; it stays.
    pass_at(&w, landed + Duration::minutes(16), false, 0, &[&marker]).await;
    // Past the finish window (40 min), the margin (15) and an operation's
    // length: gone.
    pass_at(&w, landed + Duration::minutes(56), false, 1, &[]).await;
}

#[tokio::test]
async fn the_pass_leaves_the_marker_of_a_task_no_worker_has_taken_and_reads_only_its_task() {
    let w = World::new();
    submit(&w.restarted()).await.unwrap();
    let written = w.record_meta("k").await;
    let mut before = w.bucket.snapshot();
    // Both of the marker's ages in one pass (a daily pass's case), and past
    // the record's finish window: the record is not read.
    w.clock.set(written.1.last_modified + Duration::minutes(56));
    let s = pass_of(w.process(), false).await;
    assert_eq!((s.reads, s.markers_deleted, s.errors), (0, 0, 0), "{s:?}");
    // LISTs, the task's GET, and no write but the checkpoint's.
    let writes = w.faulty.calls().into_iter().filter(|c| c.op.is_write());
    assert!(writes.clone().all(|c| c.key.starts_with("sweeper/")));
    assert!(writes.count() > 0, "its checkpoint");
    let reads: Vec<(Op, String)> = w
        .faulty
        .calls()
        .into_iter()
        .filter(|c| !c.key.starts_with("sweeper/") && !c.op.is_write() && c.op != Op::List)
        .map(|c| (c.op, c.key.split('/').next().unwrap_or("").to_owned()))
        .collect();
    assert_eq!(reads, [(Op::Get, "tasks".into())]);
    let mut after = w.bucket.snapshot();
    after.retain(|(k, ..)| !k.starts_with("sweeper/"));
    before.retain(|(k, ..)| !k.starts_with("sweeper/"));
    assert_eq!(after, before, "byte for byte, but the checkpoint");
    // Judged once: a later pass reads nothing of it.
    w.clock.advance(Duration::hours(2));
    let s = pass_of(w.process(), false).await;
    let gets = w
        .faulty
        .calls()
        .into_iter()
        .filter(|c| c.op == Op::Get && c.key.starts_with("tasks/"))
        .count();
    assert_eq!((s.markers_deleted, gets), (0, 1), "{s:?}");
}
