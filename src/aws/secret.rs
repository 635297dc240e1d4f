//! The key pair of a bucket at another provider (R2, B2, MinIO,
//! SeaweedFS, ...), kept in a Secrets Manager secret (`S3_CREDENTIALS_SECRET`)
//! and read once per process, at start. Only the S3 client signs with it:
//! SQS, logs and metrics stay on the function's role.
//!
//! The secret's string is a JSON object:
//! `{"access_key_id": "...", "secret_access_key": "..."}`. Nothing read from
//! it is ever logged or put into an error: a malformed secret is reported by
//! what is wrong with its shape, never by its content.

use aws_sdk_s3::config::Credentials;
use aws_sdk_secretsmanager::error::ProvideErrorMetadata;
use serde::Deserialize;

#[derive(Deserialize)]
struct KeyPair {
    access_key_id: String,
    secret_access_key: String,
}

/// Reads the key pair in the secret `secret_id` (its name or ARN), with the
/// credentials the SDK finds (the role's), from Secrets Manager's endpoint
/// for the region (`AWS_ENDPOINT_URL_SECRETS_MANAGER` for a local one).
pub(crate) async fn key_pair(secret_id: &str) -> Result<Credentials, String> {
    let shared = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(super::https_client())
        .timeout_config(super::timeouts())
        .load()
        .await;
    let mut conf = aws_sdk_secretsmanager::config::Builder::from(&shared);
    if shared.region().is_none() {
        conf = conf.region(aws_sdk_secretsmanager::config::Region::new("us-east-1"));
    }
    let client = aws_sdk_secretsmanager::Client::from_conf(conf.build());
    let out = client
        .get_secret_value()
        .secret_id(secret_id)
        .send()
        .await
        .map_err(|e| {
            // The error of a call that returned no secret: its code and
            // message, or what kept the call from being answered.
            match e.as_service_error() {
                Some(se) => format!(
                    "cannot be read: {}: {}",
                    se.code().unwrap_or("error"),
                    se.message().unwrap_or("")
                ),
                None => format!(
                    "cannot be read: {}",
                    aws_sdk_secretsmanager::error::DisplayErrorContext(&e)
                ),
            }
        })?;
    let text = out
        .secret_string()
        .ok_or("holds no string (a binary secret): it must be the JSON object {\"access_key_id\": ..., \"secret_access_key\": ...}")?;
    parse(text)
}

/// The key pair in a secret's string. The error says what shape is wrong
/// and never quotes the text (serde's messages can).
fn parse(text: &str) -> Result<Credentials, String> {
    let pair: KeyPair = serde_json::from_str(text).map_err(|_| {
        "is not the JSON object {\"access_key_id\": \"...\", \"secret_access_key\": \"...\"}"
            .to_owned()
    })?;
    if pair.access_key_id.trim().is_empty() || pair.secret_access_key.is_empty() {
        return Err("has an empty access_key_id or secret_access_key".into());
    }
    Ok(Credentials::new(
        pair.access_key_id.trim(),
        pair.secret_access_key,
        None,
        None,
        "S3_CREDENTIALS_SECRET",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_pair_is_read_and_a_malformed_secret_is_refused_without_quoting_it() {
        let c = parse(r#"{"access_key_id": " AKID ", "secret_access_key": "s3cr3t"}"#).unwrap();
        assert_eq!(
            (c.access_key_id(), c.secret_access_key()),
            ("AKID", "s3cr3t")
        );
        // The credentials' Debug hides the secret.
        assert!(!format!("{c:?}").contains("s3cr3t"));
        for bad in [
            "s3cr3t-not-json",
            r#""s3cr3t""#,
            r#"{"access_key_id": "AKID"}"#,
            r#"{"access_key_id": 7, "secret_access_key": "s3cr3t"}"#,
            r#"{"access_key_id": "", "secret_access_key": "s3cr3t"}"#,
        ] {
            let e = parse(bad).unwrap_err();
            assert!(!e.contains("s3cr3t") && !e.contains("AKID"), "{bad}: {e}");
        }
    }
}
