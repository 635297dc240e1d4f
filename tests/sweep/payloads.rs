use super::*;

/// One orphan payload and one payload with its task (under a shard of one
/// to four digits, by turns) in every slice, written at the clock's time;
/// then a pass a day for a whole cycle, starting eight days later (past the
/// day and an hour in which the HEADs look at a payload): each pass deletes
/// the orphans of the slices its cursor takes and nothing else, and by the
/// end every orphan is gone and every payload with its task is there. A
/// fresh orphan of the first pass's slice, too young, is kept by it.
async fn old_orphans_go_by_their_slices_day_on(behaviour: Behaviour, order: ListOrder) {
    use idempotent_submit::testing::protocol::sweep::{
        PAYLOAD_CYCLE_DAYS, PAYLOAD_SLICES, PayloadPlan,
    };
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock).with_behaviour(behaviour);
    let mut settings = ordered(order);
    settings.conditional_delete = behaviour.conditional_delete;
    let q = Queue::with_clock(bucket.clone(), Arc::new(clock.clone()), settings);
    let mut orphans: Vec<(u32, String)> = Vec::new();
    let mut live: Vec<String> = Vec::new();
    for slice in 0..PAYLOAD_SLICES {
        orphans.push((slice, payload_of_slice(&bucket, slice).await));
        live.push(payload_with_its_task(&bucket, slice, 1 + slice as usize % 4).await);
    }
    clock.advance(Duration::days(8));
    let payloads = || {
        let mut k = bucket
            .keys()
            .into_iter()
            .filter(|k| k.starts_with("payloads/"))
            .collect::<Vec<_>>();
        k.sort();
        k
    };
    let mut young = None;
    let (mut cursor, mut last) = (0, None);
    for day in 0..PAYLOAD_CYCLE_DAYS {
        let plan = PayloadPlan::after(cursor, last, clock.now());
        (cursor, last) = (plan.next_slice(), Some(clock.now()));
        let slices = plan.slices;
        if day == 0 {
            young = Some(payload_of_slice(&bucket, slices.start).await);
        }
        let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
        let mut gone: Vec<&String> = orphans
            .iter()
            .filter(|(slice, _)| slices.contains(slice))
            .map(|(_, k)| k)
            .collect();
        // The fresh one is the HEADs', the next day.
        if day == 1 {
            gone.extend(young.as_ref());
        }
        assert_eq!(
            (s.payloads_deleted, s.errors),
            (gone.len() as u64, 0),
            "{behaviour:?} {order:?} day {day}: {s:?}"
        );
        let left = payloads();
        assert!(gone.iter().all(|k| !left.contains(k)), "day {day}");
        orphans.retain(|(_, k)| left.contains(k));
        if day == 0 {
            assert!(
                left.contains(young.as_ref().unwrap()),
                "too young on its day"
            );
        }
        clock.advance(Duration::days(1));
    }
    let mut expected = live;
    expected.sort();
    assert_eq!(payloads(), expected, "{behaviour:?} {order:?}");
}

on_stores! { old_orphans_go_by_their_slices_day_on:
    a_payload_orphaned_for_weeks_is_deleted_on_its_slices_day_and_one_with_its_task_never => [s3(ListOrder::Bytes)];
    old_orphans_go_by_their_slices_day_by_folders_too => [s3(ListOrder::Any)];
    old_orphans_go_by_their_slices_day_on_a_store_that_lists_folders_first =>
        [folders_first(ListOrder::Bytes), folders_first(ListOrder::Any)];
    old_orphans_go_by_their_slices_day_on_a_store_that_lists_in_no_order => [no_order(7)];
    old_orphans_go_by_their_slices_day_with_conditional_delete_off => [no_conditional_delete()];
}

/// A call and when it began.
type Began = (Op, String, chrono::DateTime<chrono::Utc>);

/// A store each of whose calls takes `each` of the engine's clock, and
/// that logs when each began.
#[derive(Clone)]
struct Paced {
    inner: MemoryStore,
    clock: ManualClock,
    each: Duration,
    began: Arc<std::sync::Mutex<Vec<Began>>>,
}

#[async_trait::async_trait]
impl common::Hooks for Paced {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        self.began
            .lock()
            .unwrap()
            .push((call.op, call.key.to_owned(), self.clock.now()));
        self.clock.advance(self.each);
        Ok(())
    }
}

/// A scheduled pass over `w`'s bucket in which each call takes a minute,
/// stopped by a deadline `minutes` on: its summary, the deadline, and when
/// each call began.
async fn pass_by_the_minute(w: &World, minutes: i64) -> (SweepSummary, DateTime<Utc>, Vec<Began>) {
    pass_paced(w, Duration::minutes(1), Duration::minutes(minutes)).await
}

/// As [`pass_by_the_minute`], each call taking `each`, the deadline `after`
/// on.
async fn pass_paced(
    w: &World,
    each: Duration,
    after: Duration,
) -> (SweepSummary, DateTime<Utc>, Vec<Began>) {
    let slow = Paced {
        inner: w.bucket.clone(),
        clock: w.clock.clone(),
        each,
        began: Arc::default(),
    };
    let deadline = w.clock.now() + after;
    let s = w
        .queue_over(common::Wrapped(slow.clone()))
        .engine()
        .sweep(&SweepOptions {
            deadline: Some(deadline),
            ..Default::default()
        })
        .await
        .unwrap();
    let began = slow.began.lock().unwrap().clone();
    (s, deadline, began)
}

#[tokio::test]
async fn the_payload_pass_makes_no_request_at_or_after_the_runs_deadline_and_the_next_goes_on() {
    let w = World::new();
    let later = w.clock.now() + Duration::days(9);
    // The first slice: where a first check's cursor begins.
    let slice = 0;
    let orphan = payload_of_slice(&w.bucket, slice).await;
    w.clock.set(later);
    // Time for the checkpoint (read, claimed, released, the tail claimed),
    // the records, the ready index's one page and the first page of
    // payloads/; not for the task listing that its orphan needs.
    let (s, deadline, began) = pass_by_the_minute(&w, 7).await;
    // None at or past the deadline but the checkpoint's last write.
    assert_only_the_checkpoint_began_past(&began, deadline);
    assert!(
        began.iter().any(|(_, k, _)| k.starts_with("payloads/")),
        "the payload pass began: {began:?}"
    );
    assert_eq!((s.payloads_deleted, s.errors), (0, 0), "{s:?}");
    assert!(!s.complete, "the tail cut short is handed on: {s:?}");
    assert!(w.keys("payloads/").contains(&orphan));
    // The next run, unhurried, takes the tail again and goes on.
    assert_eq!(w.sweep(false).await.payloads_deleted, 1);
    assert!(!w.keys("payloads/").contains(&orphan));
}

#[tokio::test]
async fn a_payload_page_whose_heads_the_runs_deadline_cuts_is_judged_again_before_its_check_completes()
 {
    // One orphan outside a first check's slices (0..9), eleven hours old:
    // only this check's HEADs judge it (the next check's reach back ends an
    // hour before this one). Each call takes 5 s (the orphan's four HEADs
    // fit in an operation's 25 s) and the run's deadline falls after each
    // call of the pass in turn (among the orphan's HEADs too): a page whose
    // HEADs it cut is listed again, so the check does not complete before
    // the orphan is judged.
    for calls in 1..=16 {
        let w = World::new();
        let orphan = payload_of_slice(&w.bucket, 200).await;
        w.clock.advance(Duration::hours(11));
        let each = Duration::seconds(5);
        let (cut, _, _) = pass_paced(&w, each, each * calls).await;
        let next = w.sweep(false).await;
        assert!(
            !w.keys("payloads/").contains(&orphan),
            "a deadline after {calls} calls: {cut:?}, then {next:?}"
        );
    }
}

/// A ready index of more than a page (a backlog): 1,100 markers over the
/// 16 shards, a month old, a third of them true (their task pending in
/// their minute), a third beside a task a worker ran, a third without a
/// task. One pass deletes exactly the two stale thirds, listing the shard
/// folders side by side, and a second pass judges none of them again.
async fn a_long_ready_index_keeps_its_true_markers(behaviour: Behaviour, order: ListOrder) {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock).with_behaviour(behaviour);
    let (mut true_ones, mut stale) = (vec![], 0);
    for i in 0..1_100 {
        let at = clock.now() + Duration::minutes(i % 7);
        match i % 3 {
            0 => true_ones.push(task_with_marker(&bucket, "pending", at, true).await),
            1 => {
                task_with_marker(&bucket, "completed", at, true).await;
                stale += 1;
            }
            _ => {
                task_with_marker(&bucket, "pending", at, false).await;
                stale += 1;
            }
        }
    }
    clock.advance(Duration::days(30));
    let f = FaultyStore::new(bucket.clone());
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), ordered(order));
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!(
        (s.markers_deleted, s.errors, s.complete),
        (stale, 0, true),
        "{s:?}"
    );
    true_ones.sort();
    let mut left: Vec<String> = bucket
        .keys()
        .into_iter()
        .filter(|k| k.starts_with("ready/"))
        .collect();
    left.sort();
    assert_eq!(left, true_ones);
    let listed_by_folder = f
        .calls()
        .iter()
        .filter(|c| c.op == Op::List && c.key.len() > "ready/".len() && c.key.starts_with("ready/"))
        .count();
    assert!(listed_by_folder >= 16, "{listed_by_folder} folder listings");
    let gets = |f: &FaultyStore<MemoryStore>| {
        f.calls()
            .iter()
            .filter(|c| c.op == Op::Get && c.key.starts_with("tasks/"))
            .count()
    };
    assert_eq!(gets(&f), 1_100, "each marker's task read once");
    clock.advance(Duration::days(1));
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!((s.markers_deleted, s.errors), (0, 0), "{s:?}");
    assert_eq!(gets(&f), 1_100, "none judged again");
}

on_stores! { a_long_ready_index_keeps_its_true_markers:
    a_long_ready_index_loses_its_stale_markers_and_keeps_its_true_ones => [s3(ListOrder::Bytes)];
    a_long_ready_index_is_scanned_alike_on_a_store_that_lists_folders_first =>
        [folders_first(ListOrder::Bytes), folders_first(ListOrder::Any)];
    a_long_ready_index_is_scanned_alike_on_a_store_that_lists_in_no_order => [no_order(7)];
}

#[tokio::test]
async fn a_shard_folder_that_cannot_be_listed_leaves_the_others_judged_and_is_judged_next_pass() {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    let (mut stale, mut in_3) = (0, 0);
    for _ in 0..1_100 {
        let m = task_with_marker(&bucket, "completed", clock.now(), true).await;
        stale += 1;
        in_3 += u64::from(m.starts_with("ready/3/"));
    }
    assert!(in_3 > 0);
    clock.advance(Duration::days(1));
    let f = FaultyStore::new(bucket.clone());
    f.inject(
        Some(Op::List),
        "ready/3/",
        1,
        1,
        Fault::Fail(StoreError::Fatal("listing refused".into())),
    );
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), common::settings());
    let left = || {
        bucket
            .keys()
            .into_iter()
            .filter(|k| k.starts_with("ready/"))
            .count() as u64
    };
    // The other fifteen folders judged and counted; the failure counted.
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!((s.markers_deleted, s.errors), (stale - in_3, 1), "{s:?}");
    assert_eq!(left(), in_3);
    // The scan did not complete, so the next pass's window takes this
    // one's in too: the folder's markers are judged then.
    clock.advance(Duration::days(1));
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    assert_eq!((s.markers_deleted, s.errors), (in_3, 0), "{s:?}");
    assert_eq!(left(), 0);
}

#[tokio::test]
async fn a_marker_scan_cut_short_by_the_runs_deadline_is_begun_again_by_the_next_pass() {
    let w = World::new();
    let stale = task_with_marker(&w.bucket, "completed", w.clock.now(), true).await;
    w.clock.advance(Duration::hours(1));
    // Time for the checkpoint (read, claimed, released, the tail claimed),
    // the records and the ready index's page, not for the task read that
    // judges its marker.
    let (s, deadline, began) = pass_by_the_minute(&w, 6).await;
    // No request but the checkpoint's write-back (its stop margin) at or
    // past the deadline, and no read of the marker's task.
    assert_only_the_checkpoint_began_past(&began, deadline);
    assert!(
        began
            .iter()
            .any(|(op, k, _)| *op == Op::List && k.starts_with("ready/")),
        "the scan began: {began:?}"
    );
    assert!(
        !began.iter().any(|(_, k, _)| k.starts_with("tasks/")),
        "{began:?}"
    );
    // The tail, cut short in an invocation that began with the records,
    // is handed on whole: the pass is not complete.
    assert_eq!((s.markers_deleted, s.complete), (0, false), "{s:?}");
    assert!(w.keys("ready/").contains(&stale));
    // The next run takes the tail again and judges it.
    w.clock.advance(Duration::minutes(10));
    assert_eq!(w.sweep(false).await.markers_deleted, 1);
    assert!(!w.keys("ready/").contains(&stale));
}

/// The day's payload pass over a bucket of `total` payloads (the bench's
/// row of the sweeper runs it at 10 million), of which only the day's
/// slices are built (1/256 of `total` in each, every 1000th an
/// orphan, the others with their task under our shard of one digit):
/// the requests it makes by kind, under `tasks/` and `payloads/`.
async fn slice_pass_requests(total: usize) -> (usize, usize, usize, usize, u64) {
    slice_pass_requests_under(total, ListOrder::Bytes).await
}

async fn slice_pass_requests_under(
    total: usize,
    order: ListOrder,
) -> (usize, usize, usize, usize, u64) {
    use idempotent_submit::testing::protocol::sweep::{PAYLOAD_SLICES, PayloadPlan};
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    let day = clock.now() + Duration::days(9);
    let per_slice = total / PAYLOAD_SLICES as usize;
    let mut orphans = 0;
    for slice in PayloadPlan::after(0, None, day).slices {
        for i in 0..per_slice {
            let mut b = *uuid::Uuid::new_v4().as_bytes();
            b[0] = slice as u8;
            let id = uuid::Uuid::from_bytes(b).to_string();
            let payload = format!("payloads/{id}/input.json");
            bucket
                .put(&payload, bytes::Bytes::from_static(b"1"), PutMode::Create)
                .await
                .unwrap();
            if i % 1000 == 999 {
                orphans += 1;
                continue;
            }
            let task = format!("tasks/{}/{id}.json", &id[..1]);
            bucket
                .put(&task, bytes::Bytes::from_static(b"{}"), PutMode::Create)
                .await
                .unwrap();
        }
    }
    clock.set(day);
    let f = FaultyStore::new(bucket.clone());
    let s = Queue::with_clock(f.clone(), Arc::new(clock.clone()), ordered(order))
        .engine()
        .sweep(&SweepOptions::default())
        .await
        .unwrap();
    assert_eq!(s.payloads_deleted, orphans, "{s:?}");
    let calls = f.calls();
    let n = |op: Op, prefix: &str| {
        calls
            .iter()
            .filter(|c| c.op == op && c.key.starts_with(prefix))
            .count()
    };
    (
        n(Op::List, "tasks/"),
        n(Op::List, "payloads/"),
        n(Op::Head, ""),
        n(Op::Delete, "payloads/"),
        orphans,
    )
}

#[tokio::test]
async fn under_list_order_any_more_than_a_page_of_payloads_is_listed_page_by_page_and_every_orphan_found()
 {
    // 150 payloads a slice: the day's 8 or 9 slices make more than a page.
    let (_, payload_lists, heads, deletes, orphans) =
        slice_pass_requests_under(256 * 1500, ListOrder::Any).await;
    let slices = orphans as usize;
    assert!((8..=9).contains(&slices), "{slices}");
    // Four HEADs of its task an orphan, and one of the payload itself:
    // held by id alone (bounded memory), its ETag is read again.
    assert_eq!((deletes as u64, heads as u64), (orphans, 5 * orphans));
    // The folder page by page (prefixes that end in `/` only), twice: by
    // the HEAD path's item (the tail's first page, then the rest), and by
    // the item of the day's slices for its candidates (each share of it
    // collects them again: one share here).
    assert_eq!(payload_lists, 2 * (slices * 1500).div_ceil(1000));
}

#[tokio::test]
async fn the_old_orphan_check_costs_a_page_per_thousand_tasks_of_the_days_slices_and_four_heads_an_orphan()
 {
    // 2.56 million payloads' worth: the day's 8 or 9 slices of 10,000.
    let (task_lists, payload_lists, heads, deletes, orphans) = slice_pass_requests(2_560_000).await;
    // The payloads with their task cost no HEAD: the tasks are listed.
    // Each orphan is confirmed by HEADs under every shard length before
    // it goes (a listing can miss a task that moves between shards).
    assert_eq!(heads as u64, 4 * orphans);
    assert_eq!(deletes as u64, orphans);
    // One listing of the folders of tasks/, then per slice its 9,990
    // tasks: ten pages of a thousand.
    let slices = orphans as usize / 10;
    assert!((8..=9).contains(&slices), "{slices}");
    assert_eq!(task_lists, 1 + slices * 10);
    // payloads/: a first page (more than a page: the 256 slices' folders
    // side by side), each of the day's slices ten pages, every other
    // folder (empty here) one.
    assert_eq!(payload_lists, 1 + slices * 10 + (256 - slices));
}

/// No request of `began` at or past `deadline` but the checkpoint's.
fn assert_only_the_checkpoint_began_past(began: &[Began], deadline: DateTime<Utc>) {
    assert!(
        began
            .iter()
            .all(|(_, k, at)| *at < deadline || k.starts_with("sweeper/")),
        "{began:?}"
    );
}

/// A pass over a bucket of an old orphan, a payload with its task and a
/// stale marker, with every `op` under `prefix` refused: its summary, the
/// checkpoint's `(payload_slice, markers_until)` after it, and whether the
/// orphan is still there.
async fn a_pass_refused(op: Op, prefix: &str) -> (SweepSummary, (u64, bool), bool) {
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock);
    let orphan = payload_of_slice(&bucket, 0).await;
    let named = payload_with_its_task(&bucket, 0, 1).await;
    task_with_marker(&bucket, "completed", clock.now(), true).await;
    clock.advance(Duration::days(9));
    let f = FaultyStore::new(bucket.clone());
    let refused = Fault::Fail(StoreError::Fatal("refused".into()));
    f.inject(Some(op), prefix, 1, usize::MAX, refused);
    let q = Queue::with_clock(f, Arc::new(clock.clone()), common::settings());
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    let cp = bucket.get("sweeper/checkpoint.json").await.unwrap().body;
    let cp: serde_json::Value = serde_json::from_slice(&cp).unwrap();
    assert!(bucket.keys().contains(&named));
    let cursors = (
        cp["payload_slice"].as_u64().unwrap_or(0),
        !cp["markers_until"].is_null(),
    );
    (s, cursors, bucket.keys().contains(&orphan))
}

/// 37fdfad: an error counted in the payload check holds the payload
/// cursor (the next pass checks the same slices again); an error of the
/// ready index's scan holds the scan's cursor alone.
#[tokio::test]
async fn an_error_of_the_ready_index_scan_holds_its_cursor_and_not_the_payload_checks() {
    let (s, cursors, orphan_left) = a_pass_refused(Op::List, "ready/").await;
    assert!(s.errors > 0, "{s:?}");
    assert_eq!(
        cursors,
        (9, false),
        "the payload cursor moved, the scan's not"
    );
    assert!(!orphan_left);
}

#[tokio::test]
async fn an_error_of_the_payload_check_holds_its_cursor_and_not_the_ready_index_scans() {
    let (s, cursors, orphan_left) = a_pass_refused(Op::Head, "payloads/").await;
    assert!(s.errors > 0, "{s:?}");
    assert_eq!(
        cursors,
        (0, true),
        "the scan's cursor moved, the payload one not"
    );
    assert!(orphan_left);
}
