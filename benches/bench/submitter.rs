//! Due messages from the submitter (`RECORD_EVENTS=submitter`): round trips
//! of a new submit through the link in both modes, a batch of 100's round
//! trips and SQS requests, and the requests and dollars per million keyed
//! submits in both modes.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use idempotent_submit::due_sender::{
    DueOrder, DueSender, MemoryDueQueue, RecordDue, SendError, SqsDueSender,
};
use idempotent_submit::store::{FaultyStore, Op, S3Store};
use idempotent_submit::testing::intake::due::{DueMessage, handle_messages};
use idempotent_submit::{Clock, ManualClock, MemoryStore, Queue, Settings, SystemClock};
use serde_json::json;

use crate::cost::{GET, PUT, SQS};
use crate::input;
use crate::link::{keep_busy, link, link_delay, moto_addr};
use crate::moto::{moto_queue, moto_store};
use crate::report::{Report, median};

const ROUNDS: usize = 3;
const PER_ROUND: usize = 20;
const BATCH: usize = 100;

/// An SQS client on moto through `endpoint` (the link, or moto itself).
fn sqs_via(endpoint: &str) -> aws_sdk_sqs::Client {
    let conf = aws_sdk_sqs::config::Builder::new()
        .behavior_version(aws_sdk_sqs::config::BehaviorVersion::latest())
        .http_client(
            aws_smithy_http_client::Builder::new()
                .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                    aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                ))
                .build_https(),
        )
        .endpoint_url(endpoint)
        .region(aws_sdk_sqs::config::Region::new("us-east-1"))
        .credentials_provider(aws_sdk_sqs::config::Credentials::new(
            "test", "test", None, None, "static",
        ))
        .build();
    aws_sdk_sqs::Client::from_conf(conf)
}

/// Median seconds of `PER_ROUND` new keyed submits one after the other,
/// through a link of `delay` to moto (S3 and, under submitter, SQS).
async fn new_submits(round: usize, delay: Duration, submitter: Option<DueOrder>) -> f64 {
    let direct = moto_store().await;
    let via = link(moto_addr(), delay).await;
    let through = S3Store::for_endpoint(&via, direct.bucket());
    let mut q = Queue::new(through, Settings::default());
    if let Some(order) = submitter {
        let url = moto_queue(&format!("due-{}", direct.bucket()), 600).await;
        q = q.with_due_sender_ordered(
            SqsDueSender::new(sqs_via(&via), url),
            direct.bucket(),
            order,
        );
    }
    let inp = input(1024);
    // Warm the connection pools (S3's pair, and SQS's).
    for i in 0..4 {
        q.submit("bench", inp.clone())
            .idempotency_key(format!("warm-{round}-{i}"))
            .await
            .expect("a submit through the link");
    }
    let mut xs = Vec::with_capacity(PER_ROUND);
    for i in 0..PER_ROUND {
        let t = Instant::now();
        let s = q
            .submit("bench", inp.clone())
            .idempotency_key(format!("r{round}-{i}"))
            .await
            .expect("a submit through the link");
        assert!(s.created());
        xs.push(t.elapsed().as_secs_f64());
    }
    median(&mut xs, "new submit latency")
}

/// A due queue in memory behind a fixed delay each way on every request,
/// counting requests.
#[derive(Clone)]
struct DelayedDue {
    inner: MemoryDueQueue,
    delay: Duration,
    requests: Arc<AtomicUsize>,
}

#[async_trait]
impl DueSender for DelayedDue {
    async fn send(&self, messages: &[RecordDue]) -> Vec<Result<(), SendError>> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(self.delay).await;
        let out = self.inner.send(messages).await;
        tokio::time::sleep(self.delay).await;
        out
    }
}

/// Seconds of one batch of `BATCH` new keys in submitter mode, against the
/// in-memory store and due queue behind `delay`; and its SQS requests.
async fn batch(delay: Duration, tag: &str, order: DueOrder) -> (f64, usize) {
    let store = crate::batch::delayed(delay);
    let due = DelayedDue {
        inner: MemoryDueQueue::new(Arc::new(SystemClock), chrono::Duration::seconds(600)),
        delay,
        requests: Arc::default(),
    };
    let q = Queue::new(store, Settings::default()).with_due_sender_ordered(due.clone(), "b", order);
    let inp = input(1024);
    let start = Instant::now();
    let results = q
        .submit_many((0..BATCH).map(|i| {
            q.submit("bench", inp.clone())
                .idempotency_key(format!("{tag}-{i}"))
        }))
        .await;
    let t = start.elapsed().as_secs_f64();
    assert!(
        results
            .iter()
            .all(|r| r.as_ref().is_ok_and(|s| s.created()))
    );
    (t, due.requests.load(Ordering::Relaxed))
}

/// Seconds of `n` new keyed submits one after the other against the
/// in-memory store (and, under submitter, due queue) behind `delay`.
async fn singles(delay: Duration, submitter: Option<DueOrder>, n: usize, tag: &str) -> f64 {
    let mut q = Queue::new(crate::batch::delayed(delay), Settings::default());
    if let Some(order) = submitter {
        let due = DelayedDue {
            inner: MemoryDueQueue::new(Arc::new(SystemClock), chrono::Duration::seconds(600)),
            delay,
            requests: Arc::default(),
        };
        q = q.with_due_sender_ordered(due, "b", order);
    }
    let inp = input(1024);
    let start = Instant::now();
    for i in 0..n {
        let s = q
            .submit("bench", inp.clone())
            .idempotency_key(format!("{tag}-{i}"))
            .await
            .expect("a submit");
        assert!(s.created());
    }
    start.elapsed().as_secs_f64()
}

/// S3 PUT-priced and GET-priced requests in a call log.
fn priced(calls: &[idempotent_submit::store::Call]) -> (usize, usize) {
    let gets = calls
        .iter()
        .filter(|c| matches!(c.op, Op::Get | Op::Head))
        .count();
    let puts = calls
        .iter()
        .filter(|c| !matches!(c.op, Op::Get | Op::Head | Op::Delete))
        .count();
    (puts, gets)
}

/// What one keyed submit of each kind costs, in memory: its own requests,
/// and its due message's at the sweeper (receive and delete in batches of
/// ten; GET record, GET task and HEAD marker while the record can still be
/// finished, the task untouched).
async fn per_submit(r: &mut Report) {
    let clock = ManualClock::at_epoch();
    let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let stale = Settings::default().stale_creating_after;
    let due = MemoryDueQueue::new(Arc::new(clock.clone()), stale);
    let f = FaultyStore::new(mem.clone());
    let q = Queue::with_clock(f.clone(), Arc::new(clock.clone()), Settings::default())
        .with_due_sender(due.clone(), "b");
    let sweeper_store = FaultyStore::new(mem.clone());
    let sweeper = Queue::with_clock(
        sweeper_store.clone(),
        Arc::new(clock.clone()),
        Settings::default(),
    );
    r.line("| keyed submit | mode | S3 PUT | S3 GET/HEAD | SQS | sweeper S3 GET/HEAD | dollars per million |");
    r.line("| --- | --- | --- | --- | --- | --- | --- |");
    let mut rows = Vec::new();
    for (kind, input) in [
        ("new", json!(1)),
        ("replay", json!(1)),
        ("conflict", json!(2)),
    ] {
        f.reset_log();
        let sent_before = due.requests().len();
        let _ = q.submit("t", input).idempotency_key("k").await;
        let (puts, gets) = priced(&f.calls());
        let sends = due.requests().len() - sent_before;
        clock.advance(stale);
        let messages: Vec<DueMessage> = due
            .take_visible()
            .into_iter()
            .map(|m| DueMessage {
                id: m.id,
                body: m.body,
            })
            .collect();
        sweeper_store.reset_log();
        handle_messages(&sweeper, "b", &messages, false, None).await;
        let (_, sweep_gets) = priced(&sweeper_store.calls());
        clock.advance(chrono::Duration::seconds(1) - stale);
        rows.push((kind, puts, gets, sends, sweep_gets));
    }
    for (kind, puts, gets, sends, sweep_gets) in rows {
        for submitter in [false, true] {
            // Bucket mode: S3 sends an event for a record write only (a new
            // submit); the sweeper's reads come with it.
            let (messages, sweeps) = match (submitter, kind) {
                (true, _) => (sends as f64, sweep_gets as f64),
                (false, "new") => (1.0, sweep_gets as f64),
                (false, _) => (0.0, 0.0),
            };
            // Each message: its send, and a fifth of a receive and a delete.
            let sqs = messages * 1.2;
            let dollars = 1e6 * (puts as f64 * PUT + (gets as f64 + sweeps) * GET + sqs * SQS);
            r.line(format!(
                "| {kind} | {} | {puts} | {gets} | {sqs:.1} | {sweeps:.0} | ${dollars:.2} |",
                if submitter {
                    "submitter (either order)"
                } else {
                    "bucket"
                }
            ));
        }
    }
}

/// A due queue whose accepted send takes `by` of the manual clock before
/// the submit goes on: the record's PUT lands that long after its
/// message's `sent_at` (a claim retried, or slow).
#[derive(Clone)]
struct Lagging {
    inner: MemoryDueQueue,
    clock: ManualClock,
    by: chrono::Duration,
}

#[async_trait]
impl DueSender for Lagging {
    async fn send(&self, messages: &[RecordDue]) -> Vec<Result<(), SendError>> {
        let out = self.inner.send(messages).await;
        self.clock.advance(self.by);
        out
    }
}

/// Receives of one submit's due message until the sweeper acknowledges
/// it, under `before_claim`: the record's PUT landing `lag` after the send,
/// or never (`None`: the process died before it). Each hand-back is
/// visible again after the due queue's visibility timeout (template.yaml,
/// 720 s). The receives, and what the last one did.
async fn receives_until_acknowledged(lag: Option<chrono::Duration>) -> (usize, &'static str) {
    let clock = ManualClock::at_epoch();
    let mem = MemoryStore::new(Arc::new(clock.clone()) as Arc<dyn Clock>);
    let stale = Settings::default().stale_creating_after;
    let inner = MemoryDueQueue::new(Arc::new(clock.clone()), stale);
    let due = Lagging {
        inner: inner.clone(),
        clock: clock.clone(),
        by: lag.unwrap_or_default(),
    };
    let f = FaultyStore::new(mem.clone());
    if lag.is_none() {
        f.inject(
            Some(Op::PutCreate),
            "idempotency/",
            1,
            1,
            idempotent_submit::store::Fault::CrashBefore,
        );
    }
    let q = Queue::with_clock(f, Arc::new(clock.clone()), Settings::default())
        .with_due_sender_ordered(due, "b", DueOrder::BeforeClaim);
    let submitted = q.submit("t", json!(1)).idempotency_key("k").await;
    assert_eq!(submitted.is_ok(), lag.is_some());
    let sweeper = Queue::with_clock(mem, Arc::new(clock.clone()), Settings::default());
    let queued = inner.queued();
    assert_eq!(queued.len(), 1);
    clock.set(clock.now().max(queued[0].visible_at));
    let mut receives = 0;
    loop {
        let mut visible = inner.take_visible();
        let Some(m) = visible.pop() else {
            panic!("the message was lost");
        };
        receives += 1;
        let b = handle_messages(
            &sweeper,
            "b",
            &[DueMessage {
                id: m.id.clone(),
                body: m.body.clone(),
            }],
            false,
            None,
        )
        .await;
        if b.retry.is_empty() {
            let s = &b.summary;
            let what = if s.due_no_record > 0 {
                "acknowledged, no record (`SweepDueNoRecord`)"
            } else if s.finished > 0 {
                "finished the record"
            } else {
                "found nothing missing"
            };
            return (receives, what);
        }
        assert!(receives < 10, "handed back {receives} times");
        inner.hand_back(m, chrono::Duration::seconds(720));
        clock.advance(chrono::Duration::seconds(720));
    }
}

/// The sweeper's receives of a message sent before its record exists.
async fn early_receives(r: &mut Report) {
    r.line(
        "\n**The sweeper's receives of an early message (`before_claim`).** In memory with a manual clock: one keyed submit whose message the queue accepts, its record's PUT landing 0 s, 2 s or 20 s (a claim retried up to the 25 s operation deadline) after the send, or never (the process died before it); the message read once the queue's delay (the stale age) has passed, and each hand-back visible again after the due queue's 720 s visibility timeout. A receive costs a tenth of a `ReceiveMessage` and, for the last, a tenth of a `DeleteMessageBatch`.\n",
    );
    r.line("| the record's PUT | receives | the last receive |");
    r.line("| --- | ---: | --- |");
    let mut normal = 0;
    let mut died = 0;
    for (name, lag) in [
        ("lands with the send (0 s)", Some(0)),
        ("lands 2 s after the send", Some(2)),
        ("lands 20 s after the send", Some(20)),
        ("never: the process died before it", None),
    ] {
        let (n, what) = receives_until_acknowledged(lag.map(chrono::Duration::seconds)).await;
        match lag {
            Some(0) => normal = n,
            None => died = n,
            _ => {}
        }
        r.line(format!("| {name} | {n} | {what} |"));
    }
    r.line(format!(
        "\nA message whose record exists is finished or acknowledged at its first receive: the record's age is judged from the send time the message carries, not from the PUT. A message whose submit wrote nothing comes back until its claim can no longer land (the operation deadline, the late-write margin and the clock allowance after its send, 16 min 25 s), {died} receives in all."
    ));
    r.target(
        "sweeper receives of a before_claim message: a normal submit, a submit that died before its PUT",
        format!("{normal}, {died}"),
        "1, ≤ 3",
        normal == 1 && died <= 3,
    );
}

pub(crate) async fn submitter(r: &mut Report) {
    r.line("\n## Due messages from the submitter (`RECORD_EVENTS=submitter`)\n");
    let d = link_delay();
    let two_d = 2.0 * d.as_secs_f64();
    // Round trips against stores that serve every request at once, as S3
    // and SQS do: the protocol's waits, not one server's queue.
    let b = Duration::from_millis(50);
    let n = 10;
    r.line(format!(
        "**A new submit, round trips.** The in-memory store and an in-memory due queue, each behind a delay each way on every request, serving all requests at once as S3 and SQS do: {n} new keyed submits (1 KiB inputs) one after the other, at B = {} ms and at 2B, three rounds; round trips of one = (time at 2B − time at B) / 2B / {n}.\n",
        b.as_millis()
    ));
    r.line("| round | bucket | submitter, `before_claim` | submitter, `with_claim` |");
    r.line("| --- | --- | --- | --- |");
    let (mut mem_b, mut mem_before, mut mem_with) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..3 {
        let rt = |t1: f64, t2: f64| (t2 - t1) / (2.0 * b.as_secs_f64()) / n as f64;
        let at = |mode: Option<DueOrder>, tag: &str| {
            let tag = format!("{tag}{round}");
            async move {
                rt(
                    singles(b, mode, n, &format!("{tag}-1")).await,
                    singles(2 * b, mode, n, &format!("{tag}-2")).await,
                )
            }
        };
        let bk = at(None, "b").await;
        let before = at(Some(DueOrder::BeforeClaim), "s").await;
        let with = at(Some(DueOrder::WithClaim), "w").await;
        mem_b.push(bk);
        mem_before.push(before);
        mem_with.push(with);
        r.line(format!(
            "| {} | {bk:.2} | {before:.2} | {with:.2} |",
            round + 1
        ));
    }
    let (mb, mbefore, mwith) = (
        median(&mut mem_b, "bucket round trips in memory"),
        median(&mut mem_before, "before_claim round trips in memory"),
        median(&mut mem_with, "with_claim round trips in memory"),
    );
    r.line(format!(
        "\nMedian: **{mb:.2}** round trips in bucket mode, **{mbefore:.2}** under `DUE_MESSAGE=before_claim` (the default: the message is accepted before the record's PUT, one round trip more), **{mwith:.2}** under `with_claim` (the message beside the record's PUT: a request more in the first round, no round trip).\n"
    ));
    r.target(
        "round trips: a new submit under RECORD_EVENTS=submitter, DUE_MESSAGE=before_claim (stores that serve requests at once)",
        format!("{mbefore:.2}"),
        "≤ 3.1",
        mbefore <= 3.1,
    );
    r.target(
        "round trips: a new submit under RECORD_EVENTS=submitter, DUE_MESSAGE=with_claim (stores that serve requests at once)",
        format!("{mwith:.2}"),
        "≤ 2.1",
        mwith <= 2.1,
    );
    r.target(
        "round trips: a new submit in bucket mode (stores that serve requests at once)",
        format!("{mb:.2}"),
        "≤ 2.1",
        mb <= 2.1,
    );
    r.line(format!(
        "**A new submit through the link, against moto.** The TCP link of \"Round trips on the response path\" (D = {} ms each way), in front of moto's S3 and, in submitter mode, its SQS too: {PER_ROUND} new keyed submits (1 KiB inputs) one after the other, at D and at 0, {ROUNDS} rounds, moto kept busy; round trips = (median at D − median at 0) / 2D. The due message is accepted before the record's PUT (`before_claim`, the default) or goes out beside it (`with_claim`).\n",
        d.as_millis()
    ));
    r.line("| round | bucket: round trips | `before_claim`: round trips | `with_claim`: round trips | `before_claim`: median at D |");
    r.line("| --- | --- | --- | --- | --- |");
    let busy = keep_busy().await;
    let (mut bucket, mut before, mut with) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let rounds = |mode: Option<DueOrder>, k: usize| async move {
            let at0 = new_submits(6 * round + 2 * k, Duration::ZERO, mode).await;
            let atd = new_submits(6 * round + 2 * k + 1, d, mode).await;
            ((atd - at0) / two_d, atd)
        };
        let (b, _) = rounds(None, 0).await;
        let (s, sd) = rounds(Some(DueOrder::BeforeClaim), 1).await;
        let (w, _) = rounds(Some(DueOrder::WithClaim), 2).await;
        bucket.push(b);
        before.push(s);
        with.push(w);
        r.line(format!(
            "| {} | {b:.2} | {s:.2} | {w:.2} | {:.0} ms |",
            round + 1,
            sd * 1000.0
        ));
    }
    drop(busy);
    let (b, s, w) = (
        median(&mut bucket, "bucket round trips"),
        median(&mut before, "before_claim round trips"),
        median(&mut with, "with_claim round trips"),
    );
    r.line(format!(
        "\nMedian: **{b:.2}** round trips in bucket mode, **{s:.2}** under `before_claim`, **{w:.2}** under `with_claim`. moto serves one request at a time, so under `with_claim` the submitter's SendMessage queues behind its record's PUT there (S3 and SQS are two services that serve at once); on a loaded machine these rounds spread widely, and the figures above, against stores that serve at once, are the protocol's."
    ));

    // At B and 2B, not at 0: the batch's own CPU (100 submits one after
    // the other on one task) then hides under its waits at both delays, and
    // the difference is the waits alone, whatever the build's speed.
    let b = Duration::from_millis(250);
    let two_b = 2.0 * b.as_secs_f64();
    r.line(format!(
        "\n**A batch of {BATCH} in submitter mode.** The in-memory store and an in-memory due queue, each behind a delay each way on every request, serving all requests at once (as in \"Batch submit\"): a batch of {BATCH} new keys (1 KiB inputs) through `Queue::submit_many`, at B = {} ms and at 2B, three rounds; round trips = (time at 2B − time at B) / 2B (the batch's CPU hides under its waits at both).\n",
        b.as_millis()
    ));
    for (order, limit) in [(DueOrder::BeforeClaim, 3.5), (DueOrder::WithClaim, 2.5)] {
        r.line("| round | order | round trips | time at B | time at 2B | SQS requests |");
        r.line("| --- | --- | --- | --- | --- | --- |");
        let mut rts = Vec::new();
        let mut requests = 0;
        for round in 0..3 {
            let tag = format!("{}{round}", order.as_str());
            let (t1, _) = batch(b, &format!("{tag}-1"), order).await;
            let (t2, n) = batch(2 * b, &format!("{tag}-2"), order).await;
            let rt = (t2 - t1) / two_b;
            rts.push(rt);
            requests = n;
            r.line(format!(
                "| {} | `{}` | {rt:.2} | {t1:.2} s | {t2:.2} s | {n} |",
                round + 1,
                order.as_str()
            ));
        }
        let rt = median(&mut rts, "submitter batch round trips");
        r.line(format!(
            "\n`{}`: median **{rt:.2} round trips** and {requests} `SendMessageBatch` requests for {BATCH} new keys.\n",
            order.as_str()
        ));
        r.target(
            format!(
                "round trips: a batch of {BATCH} new keys under RECORD_EVENTS=submitter, DUE_MESSAGE={}",
                order.as_str()
            ),
            format!("{rt:.2}, {requests} SQS requests"),
            format!("≤ {limit}, 10"),
            rt <= limit && requests == BATCH / 10,
        );
    }

    r.line(
        "\n**Requests and dollars per million keyed submits, by mode.** Counted in memory, one submit of each kind of one key, then its due message at the sweeper once it is due (the task untouched: GET record, GET task, HEAD marker). SQS: each message's send (S3's, or the submitter's) and a fifth of a request for its receive and delete in batches of ten. Lambda and API Gateway are the same in both modes and left out (\"What it costs\"). In bucket mode S3 sends an event only for a record write; in submitter mode every keyed submit sends before it knows whether the key is taken.\n",
    );
    per_submit(r).await;
    r.line(
        "\nA new submit costs the same in both modes and in both orders (S3's send and the submitter's are one SQS request each; `before_claim` changes when the message is sent, not what is sent). A replay or a conflict costs one SQS request more, and the sweeper's reads of a record that needs nothing.",
    );
    early_receives(r).await;
}
