use super::*;

// ---- idem doctor knows the mode ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_submitter_the_doctor_expects_no_notification_and_checks_the_due_queue_instead() {
    let store = common::moto_store_versioned().await;
    let bucket = store.bucket().to_owned();
    let url = common::moto_queue(&format!("due-{bucket}"), 600).await;
    let env = |url: &str| {
        vec![
            ("RECORD_EVENTS", "submitter".to_owned()),
            ("DUE_QUEUE_URL", url.to_owned()),
        ]
    };
    let run = |env: Vec<(&'static str, String)>| {
        let bucket = bucket.clone();
        async move {
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            common::idem(&bucket, &env, &["doctor"]).await
        }
    };
    // A bucket without a notification: an error in bucket mode...
    let (code, r) = run(vec![]).await;
    assert_eq!(code, 5, "{r}");
    assert!(
        common::doctor_checks(&r).contains(&("notification".into(), "error".into())),
        "{r}"
    );
    // ...expected under submitter, with a reachable queue of the right delay.
    let (code, r) = run(env(&url)).await;
    assert_eq!(code, 0, "{r}");
    let f = common::doctor_checks(&r);
    assert!(f.contains(&("notification".into(), "ok".into())), "{r}");
    assert!(f.contains(&("due_queue".into(), "ok".into())), "{r}");
    // A delay that is not STALE_CREATING_AFTER_SECONDS, and a queue that is
    // not there, are errors.
    let mut other_stale = env(&url);
    other_stale.push(("STALE_CREATING_AFTER_SECONDS", "300".to_owned()));
    let (code, r) = run(other_stale).await;
    assert_eq!(code, 5, "{r}");
    assert!(
        common::doctor_checks(&r).contains(&("due_queue".into(), "error".into())),
        "{r}"
    );
    assert!(r.to_string().contains("its delay is 600 s"), "{r}");
    let gone = format!("{url}-gone");
    let (code, r) = run(env(&gone)).await;
    assert_eq!(code, 5, "{r}");
    assert!(
        common::doctor_checks(&r).contains(&("due_queue".into(), "error".into())),
        "{r}"
    );
    // Both the bucket and the submitter sending: a warning, not an error.
    common::moto_due_queue(&store, 600).await;
    let (code, r) = run(env(&url)).await;
    assert_eq!(code, 0, "{r}");
    assert!(
        common::doctor_checks(&r).contains(&("notification".into(), "warning".into())),
        "{r}"
    );
}
