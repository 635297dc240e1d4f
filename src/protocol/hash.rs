//! The hashes and canonical forms that every client of the bucket layout
//! computes alike, so that they share one idempotency namespace.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;
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
    // Serializing a Value into a Vec cannot fail: its keys are strings and
    // its numbers finite.
    let _ = serde_json::to_writer(&mut out, &Canonical(v));
    out
}

/// [`canonical_json`] as raw JSON, the form a task object embeds: written
/// once by serde_json's serializer and taken as it is, never parsed again to
/// check it.
pub fn canonical_raw(v: &Value) -> Result<Box<RawValue>, serde_json::Error> {
    serde_json::value::to_raw_value(&Canonical(v))
}

/// A value that serializes in canonical form: objects with their keys
/// sorted at every depth, everything else as serde_json writes it.
struct Canonical<'a>(&'a Value);

impl Serialize for Canonical<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Object(map) => {
                // serde_json's map is sorted unless a dependency turns on
                // `preserve_order`; sort here so the hash never depends on
                // that.
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                let mut m = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    m.serialize_entry(k, &Canonical(v))?;
                }
                m.end()
            }
            Value::Array(items) => s.collect_seq(items.iter().map(Canonical)),
            scalar => scalar.serialize(s),
        }
    }
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

    /// The canonical writer the hashes of existing records were made with,
    /// byte by byte: the serializer must write exactly what it wrote.
    fn written_by_hand(v: &Value, out: &mut Vec<u8>) {
        match v {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                out.push(b'{');
                for (i, (k, v)) in entries.into_iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut *out, k.as_str()).unwrap();
                    out.push(b':');
                    written_by_hand(v, out);
                }
                out.push(b'}');
            }
            Value::Array(items) => {
                out.push(b'[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    written_by_hand(v, out);
                }
                out.push(b']');
            }
            scalar => serde_json::to_writer(&mut *out, scalar).unwrap(),
        }
    }

    #[test]
    fn the_canonical_form_is_byte_for_byte_what_the_hand_written_writer_made() {
        let samples = [
            r#"{"\u00e9":"\u0001\"\\\n/\u2028\ud83d\ude00","b":[{},[],-0,1.5e300,18446744073709551615,-9223372036854775808,0.1,-1.0e-7],"a":{"z":true,"y":null,"":""}}"#,
            "null",
            "\"x\"",
            "[[[{\"b\":1,\"a\":[2,{\"d\":3,\"c\":4}]}]]]",
            "123456789012345678901234567890",
        ];
        for text in samples {
            let v: Value = serde_json::from_str(text).unwrap();
            let mut expected = Vec::new();
            written_by_hand(&v, &mut expected);
            assert_eq!(canonical_json(&v), expected, "{text}");
            assert_eq!(
                canonical_raw(&v).unwrap().get().as_bytes(),
                expected,
                "{text}"
            );
        }
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
