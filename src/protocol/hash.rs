//! The hashes and canonical forms that every client of the bucket layout
//! computes alike, so that they share one idempotency namespace.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::names::{IdempotencyKey, Tenant};

fn sha256_tagged(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// `"sha256:" + hex(sha256(scope + ":" + key))`; with a tenant,
/// `"sha256:" + hex(sha256("@" + hex(sha256(principal)) + ":" + scope + ":" + key))`.
///
/// Both forms are injective: scope names contain no `:`, so the first `:`
/// ends the scope; the tenant form starts with `@`, which no scope name can,
/// and its principal hash has a fixed length.
pub fn key_hash(scope: &str, key: &IdempotencyKey, tenant: Option<&Tenant>) -> String {
    let mut h = Sha256::new();
    if let Some(t) = tenant {
        h.update(b"@");
        h.update(t.hex().as_bytes());
        h.update(b":");
    }
    h.update(scope.as_bytes());
    h.update(b":");
    h.update(key.as_str().as_bytes());
    format!("sha256:{}", hex::encode(h.finalize()))
}

/// `"sha256:" + hex(sha256(canonical(input)))`.
pub fn input_hash(canonical: &[u8]) -> String {
    sha256_tagged(canonical)
}

/// The input serialized compactly with object keys sorted (recursively), so
/// that key order and whitespace do not change the hash.
pub fn canonical_json(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(map) => {
            // serde_json's map is sorted unless a dependency turns on
            // `preserve_order`; sort here so the hash never depends on that.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                // Serializing a str into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut *out, k.as_str());
                out.push(b':');
                write_canonical(v, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(v, out);
            }
            out.push(b']');
        }
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar(v: &Value, out: &mut Vec<u8>) {
    // Serializing a scalar Value into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, v);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_order_and_whitespace_do_not_change_the_canonical_form() {
        let a: Value =
            serde_json::from_str(r#"{ "b": [1, {"z": 1, "a": null}], "a": "x" }"#).unwrap();
        let b = json!({"a": "x", "b": [1, {"a": null, "z": 1}]});
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(
            String::from_utf8(canonical_json(&a)).unwrap(),
            r#"{"a":"x","b":[1,{"a":null,"z":1}]}"#
        );
    }

    #[test]
    fn key_hash_is_sha256_of_scope_colon_key() {
        let k = IdempotencyKey::parse("charge-ORD-123").unwrap();
        let expected = format!(
            "sha256:{}",
            hex::encode(Sha256::digest(b"charge_customer:charge-ORD-123"))
        );
        assert_eq!(key_hash("charge_customer", &k, None), expected);
    }

    #[test]
    fn tenants_never_share_a_key_hash_with_each_other_or_the_plain_form() {
        let k = IdempotencyKey::parse("k").unwrap();
        let a = Tenant::from_principal("arn:aws:iam::1:user/a").unwrap();
        let b = Tenant::from_principal("arn:aws:iam::1:user/b").unwrap();
        let plain = key_hash("s", &k, None);
        assert_ne!(key_hash("s", &k, Some(&a)), key_hash("s", &k, Some(&b)));
        assert_ne!(key_hash("s", &k, Some(&a)), plain);
        // The plain form that spells out the tenant form's material is still
        // another hash: a scope never starts with '@'.
        let forged = IdempotencyKey::parse(format!("{}:s:k", a.hex())).unwrap();
        assert_ne!(key_hash("s", &forged, None), key_hash("s", &k, Some(&a)));
    }
}
