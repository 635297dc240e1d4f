//! The payload check without a set of task ids (`payload_tasks.rs`): on
//! every store of the matrix it deletes exactly the payloads that the rule
//! names (docs/protocol.md, "Offloaded inputs"), the rule the check with
//! the set applied: old enough, named by no task under any shard length,
//! and of a first pass's slices (the cursor's first) or within a day and an
//! hour past the orphan age.

use super::*;

/// What the bucket holds for one payload.
struct Built {
    key: String,
    /// Its task is in the bucket (under some shard length).
    has_task: bool,
    age: Duration,
    slice: u32,
}

/// Payloads of a first pass's first slice (more than two pages, with tasks
/// under every shard length, tasks without payloads between them, orphans
/// every seventh, young ones), and of the next slice outside its plan's
/// (recent ones for the HEADs, old ones for another day).
async fn bucket_of_payloads(
    bucket: &MemoryStore,
    clock: &ManualClock,
    day: DateTime<Utc>,
) -> Vec<Built> {
    use idempotent_submit::protocol::sweep::PayloadPlan;
    let ours = PayloadPlan::after(0, None, day).slices.start;
    let other = PayloadPlan::after(0, None, day).slices.end % 256;
    let mut built = Vec::new();
    for i in 0..2_600u32 {
        let (slice, age) = match i % 13 {
            0 => (ours, Duration::minutes(10)),
            1..=2 => (other, Duration::hours(3)),
            3 => (other, Duration::days(9)),
            _ => (ours, Duration::days(9)),
        };
        clock.set(day - age);
        let key = payload_of_slice(bucket, slice).await;
        let id = key.split('/').nth(1).unwrap().to_owned();
        let has_task = i % 7 != 3;
        if has_task {
            let shard = [1, 1, 1, 2, 3, 4][i as usize % 6];
            put_task(bucket, &id[..shard], &id).await;
        }
        // Tasks without payloads around it, under our shard.
        for _ in 0..2 {
            let mut b = *uuid::Uuid::new_v4().as_bytes();
            b[0] = slice as u8;
            let other_id = uuid::Uuid::from_bytes(b).to_string();
            put_task(bucket, &other_id[..1], &other_id).await;
        }
        built.push(Built {
            key,
            has_task,
            age,
            slice,
        });
    }
    clock.set(day);
    built
}

async fn put_task(bucket: &MemoryStore, shard: &str, id: &str) {
    bucket
        .put(
            &format!("tasks/{shard}/{id}.json"),
            b"{}".to_vec().into(),
            PutMode::Create,
        )
        .await
        .unwrap();
}

async fn deletes_exactly_the_payloads_the_rule_names(behaviour: Behaviour, order: ListOrder) {
    use idempotent_submit::protocol::sweep::PayloadPlan;
    let clock = ManualClock::at_epoch();
    let bucket = common::memory_store(&clock).with_behaviour(behaviour);
    let day = clock.now() + Duration::days(20);
    let built = bucket_of_payloads(&bucket, &clock, day).await;
    let mut settings = ordered(order);
    settings.conditional_delete = behaviour.conditional_delete;
    let q = Queue::with_clock(bucket.clone(), Arc::new(clock.clone()), settings);
    let s = q.engine().sweep(&SweepOptions::default()).await.unwrap();
    let slices = PayloadPlan::after(0, None, day).slices;
    // The rule: an hour is past every orphan age of the test settings, a
    // day is past it and the HEADs' day and an hour.
    let mut expected: Vec<&str> = built
        .iter()
        .filter(|b| !b.has_task && b.age >= Duration::hours(1))
        .filter(|b| slices.contains(&b.slice) || b.age < Duration::days(1))
        .map(|b| b.key.as_str())
        .collect();
    expected.sort();
    let left = bucket.keys();
    let mut gone: Vec<&str> = built
        .iter()
        .map(|b| b.key.as_str())
        .filter(|k| !left.iter().any(|l| l == k))
        .collect();
    gone.sort();
    assert!(expected.len() > 200, "{}", expected.len());
    assert_eq!(gone, expected, "{behaviour:?} {order:?}");
    assert_eq!(
        (s.payloads_deleted, s.errors),
        (expected.len() as u64, 0),
        "{behaviour:?} {order:?}: {s:?}"
    );
}

on_stores! { deletes_exactly_the_payloads_the_rule_names:
    the_merge_in_byte_order_deletes_exactly_the_orphans_the_rule_names =>
        [s3(ListOrder::Bytes), folders_first(ListOrder::Bytes), no_conditional_delete()];
    the_bounded_rounds_by_folders_delete_exactly_the_orphans_the_rule_names =>
        [s3(ListOrder::Any), folders_first(ListOrder::Any), no_order(7)];
}
