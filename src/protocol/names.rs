//! The request's parts, parsed once at the boundary (parse, don't validate):
//! a value of these types is valid by construction.

use std::fmt;

use chrono::Duration;
use sha2::{Digest, Sha256};

/// Why a request is invalid. `field` names the request field as producers
/// send it (`task_type`, `idempotency_key`, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    #[error("{field}: {reason}")]
    Field { field: &'static str, reason: String },
    /// The service requires a key (`REQUIRE_IDEMPOTENCY_KEY`) and none came.
    #[error("idempotency_key: an idempotency key is required")]
    KeyRequired,
}

impl ValidationError {
    pub fn field(field: &'static str, reason: impl Into<String>) -> Self {
        ValidationError::Field {
            field,
            reason: reason.into(),
        }
    }
}

/// 1 to 128 of `A-Z a-z 0-9 _ . -`, not starting with `.`: the names of task
/// types and scopes, which become path segments of the bucket.
fn check_name(field: &'static str, s: &str) -> Result<(), ValidationError> {
    if s.is_empty() || s.len() > 128 {
        return Err(ValidationError::field(field, "must be 1 to 128 characters"));
    }
    if s.starts_with('.') {
        return Err(ValidationError::field(field, "must not start with '.'"));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(ValidationError::field(
            field,
            format!("{c:?} is not allowed (only A-Z a-z 0-9 _ . -)"),
        ));
    }
    Ok(())
}

/// A task type, e.g. `charge_customer`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaskType(String);

impl TaskType {
    pub fn parse(s: impl Into<String>) -> Result<Self, ValidationError> {
        let s = s.into();
        check_name("task_type", &s)?;
        Ok(TaskType(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The namespace a key lives in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum Scope {
    /// The task type's own namespace (the default).
    #[default]
    TaskType,
    /// One namespace for the whole queue.
    Queue,
    /// A named namespace shared by whoever names it.
    Custom(String),
}

impl Scope {
    /// `None` is the task type; `"queue"` the queue-wide scope; anything else
    /// a custom name.
    pub fn parse(s: Option<&str>) -> Result<Self, ValidationError> {
        match s {
            None => Ok(Scope::TaskType),
            Some("queue") => Ok(Scope::Queue),
            Some(name) => {
                check_name("idempotency_scope", name)?;
                Ok(Scope::Custom(name.to_owned()))
            }
        }
    }

    /// The scope's name in the bucket layout.
    pub fn resolve<'a>(&'a self, task_type: &'a TaskType) -> &'a str {
        match self {
            Scope::TaskType => task_type.as_str(),
            Scope::Queue => "queue",
            Scope::Custom(n) => n,
        }
    }
}

/// A producer's idempotency key: 1 to 255 characters, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub const MAX_CHARS: usize = 255;

    pub fn parse(s: impl Into<String>) -> Result<Self, ValidationError> {
        let s = s.into();
        if s.is_empty() {
            return Err(ValidationError::field(
                "idempotency_key",
                "must not be empty",
            ));
        }
        if s.chars().count() > Self::MAX_CHARS {
            return Err(ValidationError::field(
                "idempotency_key",
                format!("must be at most {} characters", Self::MAX_CHARS),
            ));
        }
        if s.chars().any(char::is_control) {
            return Err(ValidationError::field(
                "idempotency_key",
                "must not contain control characters",
            ));
        }
        Ok(IdempotencyKey(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How long a record lives: at least an hour, at most the configured maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ttl(Duration);

impl Ttl {
    pub const MIN: Duration = Duration::hours(1);

    pub fn new(d: Duration, max: Duration) -> Result<Self, ValidationError> {
        if d < Self::MIN || d > max {
            return Err(ValidationError::field(
                "idempotency_ttl_seconds",
                format!(
                    "must be from {} to {} seconds",
                    Self::MIN.num_seconds(),
                    max.num_seconds()
                ),
            ));
        }
        Ok(Ttl(d))
    }

    /// A TTL from seconds, as the HTTP API and the CLI take it.
    pub fn from_seconds(secs: i64, max: Duration) -> Result<Self, ValidationError> {
        let d = Duration::try_seconds(secs)
            .ok_or_else(|| ValidationError::field("idempotency_ttl_seconds", "out of range"))?;
        Self::new(d, max)
    }

    pub fn duration(self) -> Duration {
        self.0
    }
}

/// An authenticated caller whose keys are kept apart from everyone else's
/// (`TENANT_ISOLATION=on`). Only the principal's hash is kept.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Tenant {
    hex: String,
}

impl fmt::Debug for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tenant(sha256:{})", &self.hex)
    }
}

impl Tenant {
    pub fn from_principal(principal: &str) -> Result<Self, ValidationError> {
        if principal.is_empty() {
            return Err(ValidationError::field("principal", "must not be empty"));
        }
        Ok(Tenant {
            hex: hex::encode(Sha256::digest(principal.as_bytes())),
        })
    }

    /// What the record stores: `sha256:<hex>` of the principal.
    pub fn id(&self) -> String {
        format!("sha256:{}", self.hex)
    }

    pub(crate) fn hex(&self) -> &str {
        &self.hex
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_types_and_scopes_follow_the_charset() {
        assert!(TaskType::parse("charge_customer").is_ok());
        assert!(TaskType::parse("a.b-C_9").is_ok());
        assert!(TaskType::parse("x".repeat(128)).is_ok());
        assert!(TaskType::parse("x".repeat(129)).is_err());
        assert!(TaskType::parse("").is_err());
        assert!(TaskType::parse(".hidden").is_err());
        assert!(TaskType::parse("a/b").is_err());
        assert!(TaskType::parse("a b").is_err());
        assert!(TaskType::parse("é").is_err());
        assert!(Scope::parse(Some("a:b")).is_err());
        assert!(Scope::parse(Some("..")).is_err());
    }

    #[test]
    fn the_scope_name_queue_is_the_queue_wide_scope() {
        let t = TaskType::parse("t").unwrap();
        assert_eq!(Scope::parse(Some("queue")).unwrap(), Scope::Queue);
        assert_eq!(Scope::parse(None).unwrap().resolve(&t), "t");
        assert_eq!(
            Scope::parse(Some("billing")).unwrap().resolve(&t),
            "billing"
        );
    }

    #[test]
    fn keys_are_1_to_255_characters_without_controls() {
        assert!(IdempotencyKey::parse("k").is_ok());
        assert!(IdempotencyKey::parse("é".repeat(255)).is_ok());
        assert!(IdempotencyKey::parse("é".repeat(256)).is_err());
        assert!(IdempotencyKey::parse("").is_err());
        assert!(IdempotencyKey::parse("a\nb").is_err());
        assert!(IdempotencyKey::parse("a\u{7f}b").is_err());
        assert!(IdempotencyKey::parse("with spaces and : colons").is_ok());
    }

    #[test]
    fn ttls_below_an_hour_or_above_the_maximum_are_refused() {
        let max = Duration::days(365);
        assert!(Ttl::from_seconds(3600, max).is_ok());
        assert!(Ttl::from_seconds(3599, max).is_err());
        assert!(Ttl::from_seconds(365 * 86400, max).is_ok());
        assert!(Ttl::from_seconds(365 * 86400 + 1, max).is_err());
        assert!(Ttl::from_seconds(i64::MAX, max).is_err());
        assert!(Ttl::from_seconds(-1, max).is_err());
    }
}
