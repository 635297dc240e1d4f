//! The commands for an existing bucket (`CreateBucket=false`) of
//! README.md, run as written against moto with the AWS CLI and
//! python3, and `idem doctor` on what they leave. Needs `aws` (make tools
//! installs awscli) and `python3`; fails without them.

use crate::common;

use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, Event, ExpirationStatus, FilterRule, FilterRuleName,
    LifecycleExpiration, LifecycleRule, LifecycleRuleFilter, NotificationConfiguration,
    NotificationConfigurationFilter, QueueConfiguration, S3KeyFilter,
};

/// The `sh` blocks of README.md's "An existing bucket" section, in order.
fn existing_bucket_commands() -> String {
    let doc = std::fs::read_to_string(format!("{}/README.md", env!("CARGO_MANIFEST_DIR")))
        .expect("README.md");
    let start = doc
        .find("### An existing bucket")
        .expect("README.md has a section \"An existing bucket\"");
    let section = &doc[start..];
    // Up to the next heading (`#` lines inside code blocks are comments).
    let end = section[4..]
        .find("\n## ")
        .into_iter()
        .chain(section[4..].find("\n### "))
        .min()
        .map_or(section.len(), |i| i + 4);
    let section = &section[..end];
    let mut out = String::new();
    let mut rest = section;
    while let Some(i) = rest.find("```sh\n") {
        let body = &rest[i + 6..];
        let j = body.find("\n```").expect("a closed code block");
        out.push_str(&body[..j]);
        out.push('\n');
        rest = &body[j + 4..];
    }
    assert!(
        out.contains("put-bucket-notification-configuration")
            && out.contains("put-bucket-lifecycle-configuration"),
        "both blocks found: {out}"
    );
    out
}

async fn queue_arn(name: &str) -> String {
    let url = common::moto_sqs()
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .expect("a queue on moto")
        .queue_url
        .expect("its URL");
    common::moto::queue_arn(&common::moto_sqs(), &url).await
}

/// Runs `script` with bash in a scratch directory, the bucket and the due
/// queue's ARN in the environment, the AWS CLI pointed at moto.
fn run_commands(script: &str, bucket: &str, due_arn: &str) {
    let dir = std::env::temp_dir().join(format!("bucket-setup-{bucket}"));
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new("bash")
        .arg("-euo")
        .arg("pipefail")
        .arg("-c")
        .arg(script)
        .current_dir(&dir)
        .env("BUCKET", bucket)
        .env("DUE_QUEUE_ARN", due_arn)
        .env("AWS_ENDPOINT_URL", common::moto_endpoint())
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_REGION", "us-east-1")
        .output()
        .expect("bash runs");
    common::assert_ran(
        &out,
        "the documented commands failed (are `aws` and `python3` installed? make tools installs awscli)",
    );
}

/// The bucket's own notification (`uploads/` to `theirs_arn`) and
/// lifecycle rule (`logs/` after 90 days), as a bucket in use has.
async fn their_notification_and_lifecycle(s3: &aws_sdk_s3::Client, bucket: &str, theirs_arn: &str) {
    let theirs = QueueConfiguration::builder()
        .id("uploads")
        .queue_arn(theirs_arn)
        .events(Event::S3ObjectCreated)
        .filter(
            NotificationConfigurationFilter::builder()
                .key(
                    S3KeyFilter::builder()
                        .filter_rules(
                            FilterRule::builder()
                                .name(FilterRuleName::Prefix)
                                .value("uploads/")
                                .build(),
                        )
                        .build(),
                )
                .build(),
        )
        .build()
        .unwrap();
    s3.put_bucket_notification_configuration()
        .bucket(bucket)
        .notification_configuration(
            NotificationConfiguration::builder()
                .queue_configurations(theirs)
                .build(),
        )
        .send()
        .await
        .expect("their notification");
    let logs = LifecycleRule::builder()
        .id("logs")
        .status(ExpirationStatus::Enabled)
        .filter(LifecycleRuleFilter::builder().prefix("logs/").build())
        .expiration(LifecycleExpiration::builder().days(90).build())
        .build()
        .unwrap();
    s3.put_bucket_lifecycle_configuration()
        .bucket(bucket)
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .rules(logs)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("their lifecycle rule");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_commands_add_our_notification_versioning_and_lifecycle_keeping_the_buckets_own()
 {
    let store = common::moto_store().await;
    let bucket = store.bucket().to_owned();
    let s3 = store.client();
    let due_arn = queue_arn(&format!("due-{bucket}")).await;
    let theirs_arn = queue_arn(&format!("theirs-{bucket}")).await;

    // What the bucket already has: a notification and a lifecycle rule of
    // its own.
    their_notification_and_lifecycle(s3, &bucket, &theirs_arn).await;

    let (code, before) = common::idem(&bucket, &[], &["doctor", "--due-queue-arn", &due_arn]).await;
    assert_eq!(code, 5, "{before}");
    assert!(
        common::doctor_checks(&before).contains(&("notification".into(), "error".into())),
        "{before}"
    );
    assert!(
        common::doctor_checks(&before).contains(&("versioning".into(), "warning".into())),
        "{before}"
    );

    // Twice: the commands replace their own rules and configuration, never
    // adding a second copy.
    let script = existing_bucket_commands();
    run_commands(&script, &bucket, &due_arn);
    run_commands(&script, &bucket, &due_arn);

    let n = s3
        .get_bucket_notification_configuration()
        .bucket(&bucket)
        .send()
        .await
        .expect("the notification now");
    let mut arns: Vec<&str> = n
        .queue_configurations()
        .iter()
        .map(|q| q.queue_arn())
        .collect();
    arns.sort();
    let mut want = vec![due_arn.as_str(), theirs_arn.as_str()];
    want.sort();
    assert_eq!(arns, want, "theirs kept, ours added once");

    let l = s3
        .get_bucket_lifecycle_configuration()
        .bucket(&bucket)
        .send()
        .await
        .expect("the lifecycle now");
    let ids: Vec<&str> = l.rules().iter().filter_map(|r| r.id()).collect();
    assert!(ids.contains(&"logs"), "{ids:?}");
    assert_eq!(
        ids.iter()
            .filter(|i| i.starts_with("idempotent-submit-"))
            .count(),
        7,
        "{ids:?}"
    );

    let (code, after) = common::idem(&bucket, &[], &["doctor", "--due-queue-arn", &due_arn]).await;
    assert_eq!(code, 0, "{after}");
    for (check, status) in common::doctor_checks(&after) {
        // moto has no default encryption; S3 always has (SSE-S3).
        if check != "encryption" {
            assert_eq!(status, "ok", "{check}: {after}");
        }
    }
    assert_eq!(after["errors"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_calls_a_record_expiry_shorter_than_the_longest_ttl_and_another_queue_errors() {
    let store = common::moto_store_versioned().await;
    let bucket = store.bucket().to_owned();
    let url = common::moto_due_queue(&store, 0).await;
    let short = LifecycleRule::builder()
        .id("short")
        .status(ExpirationStatus::Enabled)
        .filter(
            LifecycleRuleFilter::builder()
                .prefix("idempotency/")
                .build(),
        )
        .expiration(LifecycleExpiration::builder().days(30).build())
        .build()
        .unwrap();
    store
        .client()
        .put_bucket_lifecycle_configuration()
        .bucket(&bucket)
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .rules(short)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("a short rule");
    let (code, r) = common::idem(&bucket, &[], &["doctor"]).await;
    assert_eq!(code, 5, "{r}");
    let s = common::doctor_checks(&r);
    assert!(s.contains(&("versioning".into(), "ok".into())), "{r}");
    assert!(
        s.contains(&("notification".into(), "ok".into())),
        "{r}: {url}"
    );
    assert!(
        s.contains(&("lifecycle.idempotency_expiry".into(), "error".into())),
        "{r}"
    );
    assert_eq!(r["errors"], 1, "{r}");

    // Under a shorter longest TTL the same rule is long enough; the
    // notification to a queue that is not the due queue is an error.
    let env = [
        ("IDEMPOTENCY_MAX_TTL_DAYS", "29"),
        ("IDEMPOTENCY_TTL_DAYS", "7"),
    ];
    let (code, r) = common::idem(&bucket, &env, &["doctor"]).await;
    assert_eq!(code, 0, "{r}");
    let other = "arn:aws:sqs:us-east-1:123456789012:not-the-due-queue";
    let (code, r) = common::idem(&bucket, &env, &["doctor", "--due-queue-arn", other]).await;
    assert_eq!(code, 5, "{r}");
    assert!(
        common::doctor_checks(&r).contains(&("notification".into(), "error".into())),
        "{r}"
    );
}
