//! The `SOURCES` setting, read once at the function's start: inline JSON, or
//! `s3://bucket/key`, an object holding it (for a list longer than Lambda's
//! 4 KB of environment). A bad value stops the start, naming `SOURCES`.

use super::Sources;
use crate::config::ConfigError;
use crate::store::{S3Store, Store};

const VAR: &str = "SOURCES";

fn bad(reason: impl Into<String>) -> ConfigError {
    ConfigError {
        var: VAR,
        reason: reason.into(),
    }
}

/// `s3://bucket/key` split, or why it is not one.
pub fn s3_url(url: &str) -> Result<(String, String), ConfigError> {
    let rest = url
        .strip_prefix("s3://")
        .ok_or_else(|| bad(format!("{url:?} is not an s3:// URL")))?;
    match rest.split_once('/') {
        Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() => {
            Ok((bucket.to_owned(), key.to_owned()))
        }
        _ => Err(bad(format!(
            "{url:?} must name a bucket and a key (s3://bucket/key)"
        ))),
    }
}

/// The text of the object `key` in `store`.
pub async fn read_object(store: &dyn Store, key: &str) -> Result<String, ConfigError> {
    let object = store
        .get(key)
        .await
        .map_err(|e| bad(format!("cannot read {key:?}: {e}")))?;
    String::from_utf8(object.body.to_vec()).map_err(|_| bad(format!("{key:?} is not UTF-8 text")))
}

/// The sources `value` (the variable's value, if set) declares: none when
/// unset or blank; an `s3://` value is read through an S3 client built from
/// the environment, as the queue's is (`S3_FORCE_PATH_STYLE`).
pub async fn load(value: Option<&str>, force_path_style: bool) -> Result<Sources, ConfigError> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(Sources::none());
    };
    let text = if value.starts_with("s3://") {
        let (bucket, key) = s3_url(value)?;
        let store = S3Store::from_env(bucket, force_path_style).await;
        read_object(&store, &key).await?
    } else {
        value.to_owned()
    };
    Sources::parse(&text).map_err(|e| bad(e.0))
}

/// [`load`] of the `SOURCES` variable.
pub async fn from_env(force_path_style: bool) -> Result<Sources, ConfigError> {
    load(std::env::var(VAR).ok().as_deref(), force_path_style).await
}
