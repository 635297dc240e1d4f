//! Times as the bucket's objects write them: RFC 3339 UTC with whole seconds
//! (`2026-01-27T12:00:00Z`) on writing, any RFC 3339 time on reading; serde
//! helpers (`#[serde(with = "rfc3339")]`) for the records, the task objects,
//! the answers and the task options.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serializer};

/// `2026-01-27T12:00:00Z`: UTC, whole seconds.
pub fn format(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Serializes with [`format`].
pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format(t))
}

/// RFC 3339 UTC keeping any fraction of a second (as buquet writes a
/// `schedule_at` or `expires_at` it was given); whole seconds print as
/// [`format`] does.
pub fn format_precise(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// Serializes with [`format_precise`].
pub mod precise {
    use super::*;

    /// Writes `t` as [`format_precise`] does.
    pub fn serialize<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_precise(t))
    }

    /// An optional time, written the same way.
    pub mod option {
        use super::*;

        /// Writes `t`, or null.
        pub fn serialize<S: Serializer>(
            t: &Option<DateTime<Utc>>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => s.serialize_str(&format_precise(t)),
                None => s.serialize_none(),
            }
        }
    }
}

/// Reads an RFC 3339 time, any offset, as UTC.
pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
    let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
    DateTime::parse_from_rfc3339(&s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(serde::de::Error::custom)
}

/// An optional time: absent or null is `None`.
pub mod option {
    use super::*;

    /// Reads an optional RFC 3339 time.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<DateTime<Utc>>, D::Error> {
        #[derive(Deserialize)]
        struct W(#[serde(deserialize_with = "super::deserialize")] DateTime<Utc>);
        Ok(Option::<W>::deserialize(d)?.map(|W(t)| t))
    }
}
