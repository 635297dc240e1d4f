//! The candidates' collection of a `LIST_ORDER=any` slices item, spread
//! over shares by its side object (docs/decisions.md, "The candidates'
//! collection spread"): an invocation that dies in it is taken over from
//! the side object, a side object gone or another's is a miss (the
//! collection begins again, nothing wrongly deleted), a dry run leaves the
//! side object as it found it, a listing error in the collection is the
//! item's error (counted, not taken for the deadline), and on moto and
//! SeaweedFS the side object is written, read and removed.

use super::*;

use std::sync::Mutex;

use super::real::{Real, real_store};
use super::share::Inbox;
use super::tail::{Invocations, Paused, Payloads, cursor, payload_bucket, present};
use idempotent_submit::Clock as _;
use idempotent_submit::store::S3Store;
use idempotent_submit::testing::protocol::Continuation;

/// The side object of the first check's slices, 0 to 8, one folder digit.
const SIDE: &str = "sweeper/tail/slices-00-09.json";

/// A bucket of 18 pages of payloads under `any`, and a pass over it run one
/// invocation of 3 s at a time until the candidates' collection was cut
/// short (its side object written): the pass's invocations, and the
/// continuations still to start.
async fn cut_in_the_collection(
    clock: &Paused,
    bucket: &MemoryStore,
    inbox: &Inbox,
) -> (Payloads, Invocations, Vec<Option<Continuation>>) {
    let p = payload_bucket((2_000, 0), 2, bucket, &clock.manual).await;
    let pass = Invocations::new(bucket, clock, ListOrder::Any);
    let mut todo = vec![None];
    for _ in 0..100 {
        let Some(c) = todo.pop() else { break };
        pass.one(c, 3, inbox).await;
        todo.extend(inbox.take().into_iter().map(Some));
        if bucket.keys().iter().any(|k| k == SIDE) {
            return (p, pass, todo);
        }
    }
    panic!("the collection was never cut short");
}

/// The pass ended, the cursor moved by the plan's nine slices, exactly the
/// due orphans gone, and no side object left.
async fn assert_the_check_done(bucket: &MemoryStore, p: &Payloads) {
    assert_eq!(cursor(bucket).await, (true, 9));
    assert_eq!(present(bucket, &p.due), 0);
    assert_eq!(present(bucket, &p.recent), 0);
    assert_eq!(present(bucket, &p.named), p.named.len());
    assert_eq!(present(bucket, &p.not_today), 3);
    assert_eq!(
        keys_under(bucket, "sweeper/tail/").await,
        Vec::<String>::new()
    );
}

#[tokio::test(start_paused = true)]
async fn an_invocation_dying_in_the_candidates_collection_is_taken_over_from_its_side_object() {
    let clock = Paused::new();
    let bucket = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let inbox = Inbox::default();
    let (p, pass, mut todo) = cut_in_the_collection(&clock, &bucket, &inbox).await;
    // The next invocation to take the item dies right after it read the
    // side object (no deadline: it works the pool until it does).
    let f = FaultyStore::new(bucket.clone());
    f.inject(Some(Op::Get), "sweeper/tail/", 1, 1, Fault::CrashAfter);
    let settings = idempotent_submit::Settings {
        pass_concurrency: 4,
        ..ordered(ListOrder::Any)
    };
    let dying = Queue::with_clock(f, Arc::new(clock.clone()), settings);
    loop {
        let Some(c) = todo.pop() else {
            panic!("no invocation took the item and died");
        };
        let opts = SweepOptions {
            continuation: c,
            ..Default::default()
        };
        if dying
            .engine()
            .sweep_share(&opts, Some(&inbox))
            .await
            .is_err()
        {
            break;
        }
        todo.extend(inbox.take().into_iter().map(Some));
    }
    // The others wait for its item; once its lease runs out (no deadline:
    // 15 minutes and an operation) the next run takes it over.
    todo.extend(inbox.take().into_iter().map(Some));
    for c in todo {
        pass.one(c, 3, &inbox).await;
    }
    assert_eq!(cursor(&bucket).await, (false, 0));
    clock
        .manual
        .advance(Duration::minutes(15) + pass.q.settings().operation_timeout);
    let r = pass.drive(Some(3)).await;
    assert_eq!(r.passes().len(), 1);
    assert_the_check_done(&bucket, &p).await;
    // Taken over from the side object the dead share read: `payloads/`
    // listed from its beginning by the tail's first page and by the
    // collection once.
    assert_eq!(pass.begun("payloads/"), 2);
}

#[tokio::test(start_paused = true)]
async fn a_side_object_gone_or_another_ones_is_a_miss_the_collection_begins_again() {
    for gone in [true, false] {
        let clock = Paused::new();
        let bucket = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
        let inbox = Inbox::default();
        let (p, pass, todo) = cut_in_the_collection(&clock, &bucket, &inbox).await;
        if gone {
            bucket.delete(SIDE, None).await.unwrap();
        } else {
            // Another write (a share whose lease ran out, still running):
            // the same collection, under a nonce the place does not name.
            let body = bucket.get(SIDE).await.unwrap().body;
            let mut side: serde_json::Value = serde_json::from_slice(&body).unwrap();
            side["nonce"] = json!(uuid::Uuid::from_u128(7));
            let body = serde_json::to_vec(&side).unwrap();
            bucket
                .put(SIDE, body.into(), PutMode::Overwrite)
                .await
                .unwrap();
        }
        let r = pass.drive_from(Some(3), todo).await;
        assert_eq!(r.passes().len(), 1, "gone {gone}");
        assert_the_check_done(&bucket, &p).await;
        // Begun again: `payloads/` from its beginning a third time.
        assert_eq!(pass.begun("payloads/"), 3, "gone {gone}");
    }
}

/// A store on moto or SeaweedFS whose clock jumps an hour at the candidates' collection's
/// first page (the second listing of `payloads/` from its beginning, the
/// tail's first page being the first): the invocation's deadline comes
/// there. It logs the calls on the side objects.
#[derive(Clone)]
struct JumpAtCollection {
    inner: S3Store,
    clock: ManualClock,
    begun: Arc<Mutex<usize>>,
    sides: Arc<Mutex<Vec<Op>>>,
}

#[async_trait::async_trait]
impl common::Hooks for JumpAtCollection {
    type Inner = S3Store;

    fn inner(&self) -> &S3Store {
        &self.inner
    }

    async fn before(&self, call: &common::Call<'_>) -> Result<(), StoreError> {
        if call.key.starts_with("sweeper/tail/") {
            self.sides.lock().unwrap().push(call.op);
        }
        Ok(())
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<idempotent_submit::store::ListPage, StoreError> {
        let from_start = prefix == "payloads/" && page.is_none();
        let listed = self.inner.list(prefix, start_after, page, limit).await;
        if from_start {
            let mut begun = self.begun.lock().unwrap();
            *begun += 1;
            if *begun == 2 {
                self.clock.advance(Duration::hours(1));
            }
        }
        listed
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_moto_a_candidates_collection_cut_short_goes_on_from_its_side_object() {
    a_collection_cut_short_goes_on(Real::Moto).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_seaweedfs_a_candidates_collection_cut_short_goes_on_from_its_side_object() {
    a_collection_cut_short_goes_on(Real::SeaweedFs).await;
}

async fn a_collection_cut_short_goes_on(real: Real) {
    let store = real_store(real, common::Versioning::Off).await;
    let clock = ManualClock::new(Utc::now() - Duration::days(9));
    // Two pages of `payloads/`.
    let p = payload_bucket((120, 0), 3, &store, &clock).await;
    clock.set(Utc::now() + Duration::days(9));
    let hooked = JumpAtCollection {
        inner: store.clone(),
        clock: clock.clone(),
        begun: Arc::default(),
        sides: Arc::default(),
    };
    let mut settings = idempotent_submit::Settings {
        clock_check: idempotent_submit::ClockCheck::TrustClock,
        pass_concurrency: 4,
        ..ordered(ListOrder::Any)
    };
    settings.retry.attempt_timeout = std::time::Duration::from_secs(10);
    let q = Queue::with_clock(
        common::Wrapped(hooked.clone()),
        Arc::new(clock.clone()),
        settings,
    );
    let inbox = Inbox::default();
    // Every invocation has half an hour; the jump cuts the one collecting.
    let mut outcomes = vec![];
    let mut handed = vec![None];
    while let Some(c) = handed.pop() {
        let opts = SweepOptions {
            continuation: c,
            deadline: Some(clock.now() + Duration::minutes(30)),
            ..Default::default()
        };
        outcomes.push(q.engine().sweep_share(&opts, Some(&inbox)).await.unwrap());
        handed.extend(inbox.take().into_iter().map(Some));
        assert!(outcomes.len() < 100, "the pass never ends");
    }
    let pass = outcomes.iter().find_map(|o| o.pass.clone());
    let pass = pass.expect("the pass ended");
    // Written where the deadline cut the collection, read by the share
    // that went on, removed once the round was listed; `payloads/` never
    // listed from its beginning again.
    let sides = hooked.sides.lock().unwrap().clone();
    assert_eq!(sides.first(), Some(&Op::Put), "{sides:?}");
    assert!(sides.contains(&Op::Get), "{sides:?}");
    assert_eq!(sides.last(), Some(&Op::Delete), "{sides:?}");
    assert_eq!(*hooked.begun.lock().unwrap(), 2);
    let keys = keys_under(&store, "payloads/").await;
    let left = |ks: &[String]| ks.iter().filter(|k| keys.contains(k)).count();
    assert_eq!(left(&p.due), 0, "{pass:?}");
    assert_eq!(left(&p.named), p.named.len());
    assert_eq!(pass.payloads_deleted, p.due.len() as u64);
    assert_eq!(
        keys_under(&store, "sweeper/tail/").await,
        Vec::<String>::new()
    );
    // The cursor moved, by the plan's nine slices.
    let cp = store.get("sweeper/checkpoint.json").await.unwrap().body;
    let cp: serde_json::Value = serde_json::from_slice(&cp).unwrap();
    assert_eq!(cp["payload_slice"], json!(9));
}

/// `collect.rs` `drop_side` writes nothing in a dry run: a dry run that
/// goes through a round a pass's collection was cut in reads its side
/// object and leaves it, and the pass goes on from it. (And
/// `round_candidates` counts its LISTs in the share's `lists`.)
#[tokio::test(start_paused = true)]
async fn a_dry_run_through_a_collection_cut_short_leaves_its_side_object_to_the_pass() {
    let clock = Paused::new();
    let bucket = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let inbox = Inbox::default();
    let (p, pass, todo) = cut_in_the_collection(&clock, &bucket, &inbox).await;
    // The pass's other item (the recent payloads) and the invitations that
    // kept a slot for it taken out of its checkpoint: the slices item cut
    // in its collection is what is left, free.
    let cp = bucket.get("sweeper/checkpoint.json").await.unwrap().body;
    let mut cp: serde_json::Value = serde_json::from_slice(&cp).unwrap();
    cp["ranges"]
        .as_array_mut()
        .unwrap()
        .retain(|r| r["kind"] == "slices");
    assert_eq!(cp["ranges"].as_array().unwrap().len(), 1, "{cp}");
    cp["invites"] = json!([]);
    let cp = serde_json::to_vec(&cp).unwrap().into();
    bucket
        .put("sweeper/checkpoint.json", cp, PutMode::Overwrite)
        .await
        .unwrap();
    let side = bucket.get(SIDE).await.unwrap();
    let keys = bucket.keys();
    let watched = FaultyStore::new(bucket.clone());
    let settings = idempotent_submit::Settings {
        pass_concurrency: 4,
        ..ordered(ListOrder::Any)
    };
    let dry = Queue::with_clock(watched.clone(), Arc::new(clock.clone()), settings);
    let opts = SweepOptions {
        dry_run: true,
        continuation: todo[0],
        ..Default::default()
    };
    let o = dry.engine().sweep_share(&opts, None).await.unwrap();
    assert!(o.summary.dry_run, "{o:?}");
    // It went through the round: it read the side object, and wrote nothing.
    let calls = watched.calls();
    let on_side: Vec<Op> = calls
        .iter()
        .filter(|c| c.key == SIDE)
        .map(|c| c.op)
        .collect();
    assert_eq!(on_side, vec![Op::Get], "{calls:?}");
    // Each of its LISTs counted.
    let lists = calls.iter().filter(|c| c.op == Op::List).count();
    assert_eq!(o.summary.lists, lists as u64, "{o:?}");
    assert_eq!(bucket.keys(), keys);
    assert_eq!(bucket.get(SIDE).await.unwrap().meta.etag, side.meta.etag);
    // The pass goes on from the side object (`payloads/` listed from its
    // beginning by the tail's first page and by the collection once) and
    // deletes exactly the due orphans of the item's slices.
    let r = pass.drive_from(Some(3), todo).await;
    assert_eq!(r.passes().len(), 1);
    assert_eq!(pass.begun("payloads/"), 2);
    assert_eq!(cursor(&bucket).await, (true, 9));
    assert_eq!(present(&bucket, &p.due), 0);
    assert_eq!(present(&bucket, &p.named), p.named.len());
    assert_eq!(
        keys_under(&bucket, "sweeper/tail/").await,
        Vec::<String>::new()
    );
}

/// What [`AtCollection`] does to the candidates' collection: its LISTs of
/// `payloads/` once it began (the second listing from the beginning, the
/// tail's first page being the first).
#[derive(Clone, Copy)]
enum CollectionFault {
    /// Its first page is refused (403), once.
    Refuse,
    /// Its pages by a continuation token never answer while the flag is set.
    Hang,
}

/// A store that does [`CollectionFault`] to the candidates' collection,
/// counting the listings of `payloads/` from its beginning.
#[derive(Clone)]
struct AtCollection {
    inner: MemoryStore,
    fault: CollectionFault,
    begun: Arc<Mutex<usize>>,
    hang: Arc<std::sync::atomic::AtomicBool>,
}

impl AtCollection {
    fn new(inner: &MemoryStore, fault: CollectionFault) -> Self {
        AtCollection {
            inner: inner.clone(),
            fault,
            begun: Arc::default(),
            hang: Arc::new(true.into()),
        }
    }

    fn begun(&self) -> usize {
        *self.begun.lock().unwrap()
    }
}

#[async_trait::async_trait]
impl common::Hooks for AtCollection {
    type Inner = MemoryStore;

    fn inner(&self) -> &MemoryStore {
        &self.inner
    }

    async fn list(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        page: Option<String>,
        limit: usize,
    ) -> Result<idempotent_submit::store::ListPage, StoreError> {
        if prefix == "payloads/" && start_after.is_none() {
            let begun = {
                let mut begun = self.begun.lock().unwrap();
                *begun += usize::from(page.is_none());
                *begun
            };
            match self.fault {
                CollectionFault::Refuse if begun == 2 && page.is_none() => {
                    return Err(StoreError::Fatal("403 AccessDenied".into()));
                }
                CollectionFault::Hang
                    if begun >= 2
                        && page.is_some()
                        && self.hang.load(std::sync::atomic::Ordering::SeqCst) =>
                {
                    std::future::pending::<()>().await;
                }
                _ => {}
            }
        }
        self.inner.list(prefix, start_after, page, limit).await
    }
}

/// `collect.rs` `round_candidates`: a listing error in the collection
/// (not the deadline) is the item's error, counted, not taken for the
/// deadline and passed over quietly.
#[tokio::test(start_paused = true)]
async fn a_listing_error_in_the_candidates_collection_is_counted_as_the_items_error() {
    let clock = Paused::new();
    let bucket = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    // Two pages of `payloads/`: the tail's first page, then the items of
    // the check, the collection among them.
    let p = payload_bucket((120, 0), 3, &bucket, &clock.manual).await;
    let refusing = AtCollection::new(&bucket, CollectionFault::Refuse);
    let settings = idempotent_submit::Settings {
        pass_concurrency: 4,
        ..ordered(ListOrder::Any)
    };
    let store = common::Wrapped(refusing.clone());
    let q = Queue::with_clock(store, Arc::new(clock.clone()), settings);
    let o = q
        .engine()
        .sweep_share(&SweepOptions::default(), None)
        .await
        .unwrap();
    let pass = o.pass.expect("the pass ended in its one invocation");
    assert_eq!(refusing.begun(), 2, "refused once, not tried again");
    assert_eq!(pass.errors, 1, "{pass:?}");
    // The item stopped: its payloads are checked again by the next pass.
    assert_eq!(present(&bucket, &p.due), p.due.len());
}

/// `collect.rs` `round_candidates`: a collection cut inside a LIST (the
/// request's deadline, before the run's) keeps what it found in its side
/// object, as one cut between requests does, and the next share goes on
/// from it rather than listing `payloads/` from its beginning again.
#[tokio::test(start_paused = true)]
async fn a_collection_cut_inside_a_request_keeps_what_it_found_in_its_side_object() {
    let clock = Paused::new();
    let bucket = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let p = payload_bucket((2_000, 0), 2, &bucket, &clock.manual).await;
    let hooked = AtCollection::new(&bucket, CollectionFault::Hang);
    // A request's deadline (an operation's) comes before its retries end,
    // and well before the run's.
    let settings = idempotent_submit::Settings {
        pass_concurrency: 4,
        operation_timeout: Duration::seconds(1),
        ..ordered(ListOrder::Any)
    };
    let retries = settings.retry.attempt_timeout * settings.retry.max_attempts;
    assert!(retries > std::time::Duration::from_secs(1));
    let store = common::Wrapped(hooked.clone());
    let q = Queue::with_clock(store, Arc::new(clock.clone()), settings);
    let opts = SweepOptions {
        deadline: Some(clock.now() + Duration::minutes(1)),
        ..Default::default()
    };
    let first = q.engine().sweep_share(&opts, None).await.unwrap();
    assert!(first.pass.is_none(), "{first:?}");
    assert_eq!(hooked.begun(), 2);
    assert!(bucket.keys().iter().any(|k| k == SIDE), "no side object");
    // The next share goes on from the side object and ends the pass.
    hooked
        .hang
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let next = q
        .engine()
        .sweep_share(&SweepOptions::default(), None)
        .await
        .unwrap();
    assert!(next.pass.is_some(), "{next:?}");
    assert_eq!(hooked.begun(), 2, "begun again");
    assert_the_check_done(&bucket, &p).await;
}

/// `collect.rs` `round_candidates`: a slices item of more candidates than
/// a round holds (`ROUND`, 2^16) is checked round by round, each round
/// past the last one's last candidate: every due orphan is gone, none
/// judged twice, the named payloads kept.
#[tokio::test(start_paused = true)]
async fn a_slices_item_of_more_candidates_than_a_round_is_checked_in_rounds_each_past_the_last() {
    let clock = Paused::new();
    let bucket = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    // 66,600 payloads old enough, in the nine slices of one folder digit.
    let p = payload_bucket((7_400, 0), 4, &bucket, &clock.manual).await;
    assert!(p.named.len() + p.due.len() > 1 << 16);
    let pass = Invocations::new(&bucket, &clock, ListOrder::Any);
    let r = pass.drive(Some(30)).await;
    assert_eq!(r.passes().len(), 1);
    assert_eq!(cursor(&bucket).await, (true, 9));
    assert_eq!(present(&bucket, &p.due), 0);
    assert_eq!(present(&bucket, &p.named), p.named.len());
    // Two rounds, each listing `payloads/` from its beginning once (the
    // tail's first page the first listing).
    assert_eq!(pass.begun("payloads/"), 3);
}

/// `collect.rs` `save_side` writes nothing in a dry run: a dry run cut by
/// its deadline, wherever it comes (the candidates' collection among the
/// places), leaves the bucket as it was.
#[tokio::test(start_paused = true)]
async fn a_dry_run_cut_anywhere_by_its_deadline_writes_no_side_object() {
    let clock = Paused::new();
    let bucket = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    payload_bucket((2_000, 0), 2, &bucket, &clock.manual).await;
    let keys: std::collections::BTreeSet<String> = bucket.keys().into_iter().collect();
    let pass = Invocations::new(&bucket, &clock, ListOrder::Any);
    let mut ended = 0;
    for secs in 1..=40 {
        let opts = SweepOptions {
            dry_run: true,
            deadline: Some(clock.now() + Duration::seconds(secs)),
            ..Default::default()
        };
        let o = pass.q.engine().sweep_share(&opts, None).await.unwrap();
        let now: std::collections::BTreeSet<String> = bucket.keys().into_iter().collect();
        let added: Vec<&String> = now.difference(&keys).collect();
        assert_eq!(added, Vec::<&String>::new(), "a dry run of {secs} s wrote");
        assert_eq!(now.len(), keys.len(), "a dry run of {secs} s deleted");
        ended += usize::from(o.pass.is_some());
    }
    // The longest went through the whole pass (the collection too).
    assert!(ended > 0);
    assert!(pass.begun("payloads/") > 40);
}
