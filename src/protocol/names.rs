//! The request's parts, parsed once at the boundary (parse, don't validate):
//! a value of these types is valid by construction.

use std::fmt;

use chrono::Duration;
use sha2::{Digest, Sha256};

pub use crate::config::IfTaskFailed;

/// Why a request is invalid. `field` names the request field as producers
/// send it (`task_type`, `idempotency_key`, ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// A field is wrong.
    #[error("{field}: {reason}")]
    Field {
        /// The field, as producers send it.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The service requires a key (`REQUIRE_IDEMPOTENCY_KEY`) and none came.
    #[error("idempotency_key: an idempotency key is required")]
    KeyRequired,
}

impl ValidationError {
    /// `field` refused for `reason`.
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
    /// Checks a task type: 1 to 128 of `A-Z a-z 0-9 _ . -`, not starting with `.`.
    pub fn parse(s: impl Into<String>) -> Result<Self, ValidationError> {
        let s = s.into();
        check_name("task_type", &s)?;
        Ok(TaskType(s))
    }

    /// The task type, as sent.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The name of a custom scope: 1 to 128 of `A-Z a-z 0-9 _ . -`, not
/// starting with `.` (it becomes a path segment of the bucket). Valid by
/// construction: [`ScopeName::parse`] is the only way to make one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ScopeName(String);

impl ScopeName {
    /// Checks `name` (the field `idempotency_scope` when it is not).
    pub fn parse(name: impl Into<String>) -> Result<Self, ValidationError> {
        let name = name.into();
        check_name("idempotency_scope", &name)?;
        Ok(ScopeName(name))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
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
    Custom(ScopeName),
}

impl Scope {
    /// `None` is the task type; `"queue"` the queue-wide scope; anything else
    /// a custom name.
    pub fn parse(s: Option<&str>) -> Result<Self, ValidationError> {
        match s {
            None => Ok(Scope::TaskType),
            Some("queue") => Ok(Scope::Queue),
            Some(name) => Self::custom(name),
        }
    }

    /// The custom scope `name`, checked.
    pub fn custom(name: impl Into<String>) -> Result<Self, ValidationError> {
        ScopeName::parse(name).map(Scope::Custom)
    }

    /// The scope's name in the bucket layout.
    pub fn resolve<'a>(&'a self, task_type: &'a TaskType) -> &'a str {
        match self {
            Scope::TaskType => task_type.as_str(),
            Scope::Queue => "queue",
            Scope::Custom(n) => n.as_str(),
        }
    }
}

/// A producer's idempotency key: 1 to 255 characters, no control characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The longest key, in characters.
    pub const MAX_CHARS: usize = 255;

    /// Checks a key: 1 to [`Self::MAX_CHARS`] characters, none a control
    /// character.
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

    /// The key, as sent.
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
    /// The shortest record life.
    pub const MIN: Duration = Duration::hours(1);

    /// `d`, if it is [`Self::MIN`] to `max`.
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
        Self::new(Self::seconds(secs)?, max)
    }

    /// `idempotency_ttl_seconds` as a duration, the one conversion the HTTP
    /// API, SQS and the CLI share; its bounds are judged at the submit, where
    /// the configured maximum is known ([`Ttl::new`]).
    pub fn seconds(secs: i64) -> Result<Duration, ValidationError> {
        Duration::try_seconds(secs)
            .ok_or_else(|| ValidationError::field("idempotency_ttl_seconds", "out of range"))
    }

    /// The life, as a duration.
    pub fn duration(self) -> Duration {
        self.0
    }
}

impl IfTaskFailed {
    /// Reads a value as the body writes it (exactly `replay` or `new_task`).
    pub fn parse(v: &str) -> Result<Self, ValidationError> {
        Self::from_name(v).ok_or_else(|| {
            ValidationError::field(
                "if_task_failed",
                format!("{v:?} is not one of replay, new_task"),
            )
        })
    }
}

/// A new random id (task ids, write ids). With the `testing` feature a
/// thread may take its ids from [`set_id_source`] instead: the exhaustive
/// checker (tests/exhaustive/) replays a schedule from scratch and needs
/// the same ids every time.
pub fn new_id() -> uuid::Uuid {
    #[cfg(feature = "testing")]
    if let Some(id) = ID_SOURCE.with(|s| s.borrow_mut().as_mut().map(|f| f())) {
        return id;
    }
    uuid::Uuid::new_v4()
}

#[cfg(feature = "testing")]
type IdSource = Box<dyn FnMut() -> uuid::Uuid>;

#[cfg(feature = "testing")]
thread_local! {
    static ID_SOURCE: std::cell::RefCell<Option<IdSource>> = const { std::cell::RefCell::new(None) };
}

/// Where [`new_id`] takes this thread's ids from (`None`: random again).
#[cfg(feature = "testing")]
pub fn set_id_source(source: Option<IdSource>) {
    ID_SOURCE.with(|s| *s.borrow_mut() = source);
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
    /// The tenant of an authenticated principal (its id, as the door
    /// reads it); only its hash is kept.
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

    /// A new task id sealed to this tenant: a version-8 UUID whose last 4
    /// bytes are a hash of the tenant and of the id's other bytes (90 of
    /// them random). The task object's `idempotency.tenant` names the tenant
    /// too, but buquet's workers drop `idempotency` when they rewrite a task
    /// (claim, complete); the seal lives in the id, which every writer
    /// keeps, so `GET /tasks/{id}` still knows whose task it is.
    pub fn new_task_id(&self) -> uuid::Uuid {
        let random = *new_id().as_bytes();
        let mut bytes = *uuid::Builder::from_custom_bytes(random)
            .into_uuid()
            .as_bytes();
        let seal = self.seal(&bytes[..12]);
        bytes[12..].copy_from_slice(&seal);
        uuid::Uuid::from_bytes(bytes)
    }

    /// Was `id` made by [`Tenant::new_task_id`] for this tenant? Another
    /// tenant's id passes with probability 2^-32.
    pub fn sealed(&self, id: uuid::Uuid) -> bool {
        let b = id.as_bytes();
        id.get_version_num() == 8 && b[12..] == self.seal(&b[..12])
    }

    fn seal(&self, head: &[u8]) -> [u8; 4] {
        let mut h = Sha256::new();
        h.update(b"idempotent-submit task seal\0");
        h.update(self.hex.as_bytes());
        h.update(head);
        let d = h.finalize();
        [d[0], d[1], d[2], d[3]]
    }
}

/// An assumed role's ARN names the role and the session
/// (`arn:aws:sts::1:assumed-role/Role/i-0abc`); the session name often
/// changes per instance or per process, and a producer that retries from a
/// new session must stay the same tenant. So the principal of an assumed
/// role is the role: `arn:aws:sts::1:assumed-role/Role`. Other ARNs are kept
/// whole.
pub fn without_session(arn: &str) -> &str {
    let mut parts = arn.splitn(6, ':');
    let (Some("arn"), Some(_partition), Some("sts"), Some(_region), Some(_account), Some(res)) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return arn;
    };
    let Some(rest) = res.strip_prefix("assumed-role/") else {
        return arn;
    };
    match rest.find('/') {
        Some(i) => &arn[..arn.len() - res.len() + "assumed-role/".len() + i],
        None => arn,
    }
}

/// An authenticated caller, as API Gateway names it: an IAM ARN (an
/// assumed role's session dropped, so every session of a role is one
/// tenant), a JWT's issuer and subject, or a Lambda authorizer's
/// `principalId`. Its text form is tagged by kind, and the JWT form is
/// length-prefixed, so no two principals read alike: `iam:<ARN>`,
/// `jwt:<length of iss>:<iss>:<sub>`, `lambda:<principalId>`. The HTTP
/// edge builds it from a request's context; an operator gives its text
/// (`idem key --tenant`); both hash the same text into the same tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(String);

impl Principal {
    /// An IAM user's or role's ARN; `None` when empty.
    pub fn iam(arn: &str) -> Option<Self> {
        (!arn.is_empty()).then(|| Principal(format!("iam:{}", without_session(arn))))
    }

    /// A JWT's issuer and subject; `None` without a subject.
    pub fn jwt(iss: &str, sub: &str) -> Option<Self> {
        (!sub.is_empty()).then(|| Principal(format!("jwt:{}:{iss}:{sub}", iss.len())))
    }

    /// A Lambda authorizer's `principalId`; `None` when empty.
    pub fn lambda(id: &str) -> Option<Self> {
        (!id.is_empty()).then(|| Principal(format!("lambda:{id}")))
    }

    /// The text form, as an operator gives it.
    pub fn parse(text: &str) -> Result<Self, ValidationError> {
        let bad = |why: &str| ValidationError::field("tenant", why.to_owned());
        if let Some(arn) = text.strip_prefix("iam:") {
            return Self::iam(arn).ok_or_else(|| bad("iam: needs an ARN"));
        }
        if let Some(rest) = text.strip_prefix("jwt:") {
            let (len, tail) = rest
                .split_once(':')
                .ok_or_else(|| bad("jwt: is jwt:<length of iss>:<iss>:<sub>"))?;
            let len: usize = len
                .parse()
                .map_err(|_| bad("jwt: starts with the length of iss"))?;
            let ok =
                tail.len() > len + 1 && tail.is_char_boundary(len) && tail[len..].starts_with(':');
            if !ok {
                return Err(bad(
                    "jwt: is jwt:<length of iss>:<iss>:<sub>, with a non-empty sub",
                ));
            }
            return Ok(Principal(text.to_owned()));
        }
        if let Some(id) = text.strip_prefix("lambda:") {
            return Self::lambda(id).ok_or_else(|| bad("lambda: needs a principalId"));
        }
        Err(bad(
            "must be iam:<ARN>, jwt:<length of iss>:<iss>:<sub> or lambda:<principalId>",
        ))
    }

    /// The text form, which the tenant hashes.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A whole number, written either way (`60` or `60.0`): JSON does not tell
/// them apart, and neither does JSON Schema.
pub(crate) fn whole(v: &serde_json::Value) -> Option<u64> {
    let serde_json::Value::Number(n) = v else {
        return None;
    };
    n.as_u64().or_else(|| {
        n.as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9_007_199_254_740_992.0)
            .map(|f| f as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operators_tenant_reads_as_the_http_edge_names_it() {
        assert_eq!(
            Principal::parse("iam:arn:aws:sts::1:assumed-role/r/session-9")
                .unwrap()
                .as_str(),
            "iam:arn:aws:sts::1:assumed-role/r"
        );
        assert_eq!(
            Principal::parse("iam:arn:aws:iam::1:user/u")
                .unwrap()
                .as_str(),
            "iam:arn:aws:iam::1:user/u"
        );
        assert_eq!(
            Principal::parse("jwt:3:a:b:c").unwrap().as_str(),
            "jwt:3:a:b:c"
        );
        assert_eq!(
            Principal::parse("lambda:team-a").unwrap().as_str(),
            "lambda:team-a"
        );
        for bad in [
            "",
            "alice",
            "iam:",
            "jwt:x:a:b",
            "jwt:5:a:b",
            "jwt:1:a:",
            "lambda:",
            "jwt:1:é:s",
        ] {
            assert!(Principal::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_task_id_is_sealed_to_its_tenant_only() {
        let alice = Tenant::from_principal("lambda:alice").unwrap();
        let bob = Tenant::from_principal("lambda:bob").unwrap();
        let ids: Vec<uuid::Uuid> = (0..1000).map(|_| alice.new_task_id()).collect();
        for id in &ids {
            assert_eq!(id.get_version_num(), 8);
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
            assert!(alice.sealed(*id));
            assert!(!bob.sealed(*id));
        }
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        // A random v4 id, or a sealed id with one bit changed, is nobody's.
        assert!(!alice.sealed(uuid::Uuid::new_v4()));
        let mut b = *ids[0].as_bytes();
        b[0] ^= 1;
        assert!(!alice.sealed(uuid::Uuid::from_bytes(b)));
    }

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
        // The queue-wide scope has one name in the bucket, whatever the type.
        assert_eq!(Scope::Queue.resolve(&t), "queue");
        // No scope is the task type's own.
        assert_eq!(Scope::default(), Scope::TaskType);
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
    fn each_name_reads_back_as_it_was_given() {
        let t = TaskType::parse("charge_customer").unwrap();
        assert_eq!(
            (t.as_str(), t.to_string().as_str()),
            ("charge_customer", "charge_customer")
        );
        let k = IdempotencyKey::parse("order-17 é").unwrap();
        assert_eq!(
            (k.as_str(), k.to_string().as_str()),
            ("order-17 é", "order-17 é")
        );
        assert_eq!(ScopeName::parse("billing").unwrap().as_str(), "billing");
        let p = Principal::parse("lambda:team-a").unwrap();
        assert_eq!(p.to_string(), "lambda:team-a");
    }

    #[test]
    fn the_http_edges_principals_are_tagged_by_kind_and_empty_ones_are_none() {
        assert_eq!(
            Principal::iam("arn:aws:sts::1:assumed-role/r/s").map(|p| p.0),
            Some("iam:arn:aws:sts::1:assumed-role/r".to_owned())
        );
        // The issuer's length keeps `jwt:a:b` + `c` apart from `jwt:a` + `b:c`.
        assert_eq!(
            Principal::jwt("https://idp", "u-1").map(|p| p.0),
            Some("jwt:11:https://idp:u-1".to_owned())
        );
        assert_eq!(
            Principal::jwt("", "u").map(|p| p.0),
            Some("jwt:0::u".to_owned())
        );
        assert_eq!(
            Principal::lambda("x").map(|p| p.0),
            Some("lambda:x".to_owned())
        );
        assert_eq!(Principal::iam(""), None);
        assert_eq!(Principal::jwt("https://idp", ""), None);
        assert_eq!(Principal::lambda(""), None);
        // What the edge builds, an operator can type back.
        for p in [
            Principal::jwt("https://idp", "u-1").unwrap(),
            Principal::jwt("", "u").unwrap(),
        ] {
            assert_eq!(Principal::parse(p.as_str()), Ok(p));
        }
    }

    #[test]
    fn only_an_assumed_roles_session_is_dropped_from_an_arn() {
        for (arn, principal) in [
            (
                "arn:aws:sts::1:assumed-role/Role/i-0abc",
                "arn:aws:sts::1:assumed-role/Role",
            ),
            (
                "arn:aws-cn:sts::12:assumed-role/a.b/c/d",
                "arn:aws-cn:sts::12:assumed-role/a.b",
            ),
            (
                "arn:aws:sts::1:assumed-role/Role",
                "arn:aws:sts::1:assumed-role/Role",
            ),
            (
                "arn:aws:sts::1:federated-user/u",
                "arn:aws:sts::1:federated-user/u",
            ),
            ("arn:aws:iam::1:role/Role/x", "arn:aws:iam::1:role/Role/x"),
            (
                "urn:aws:sts::1:assumed-role/Role/s",
                "urn:aws:sts::1:assumed-role/Role/s",
            ),
            (
                "arn:aws:sts:assumed-role/Role/s",
                "arn:aws:sts:assumed-role/Role/s",
            ),
        ] {
            assert_eq!(without_session(arn), principal, "{arn}");
        }
    }

    #[test]
    fn a_tenant_is_known_by_its_principals_hash_only() {
        let t = Tenant::from_principal("lambda:alice").unwrap();
        // sha256("lambda:alice"), as the record stores it.
        let hex = hex::encode(Sha256::digest(b"lambda:alice"));
        assert_eq!(t.id(), format!("sha256:{hex}"));
        assert_eq!(t.hex(), hex);
        assert_eq!(format!("{t:?}"), format!("Tenant(sha256:{hex})"));
        assert!(!format!("{t:?}").contains("alice"));
        assert_ne!(t, Tenant::from_principal("lambda:bob").unwrap());
        assert_eq!(
            Tenant::from_principal(""),
            Err(ValidationError::field("principal", "must not be empty"))
        );
    }

    #[test]
    fn a_ttl_is_the_duration_it_was_given() {
        let max = Duration::days(365);
        assert_eq!(
            Ttl::from_seconds(7200, max).unwrap().duration(),
            Duration::hours(2)
        );
        assert_eq!(Ttl::seconds(90), Ok(Duration::seconds(90)));
        assert_eq!(
            Ttl::new(Duration::minutes(59), max),
            Err(ValidationError::field(
                "idempotency_ttl_seconds",
                "must be from 3600 to 31536000 seconds"
            ))
        );
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

    #[cfg(feature = "testing")]
    #[test]
    fn a_thread_given_an_id_source_takes_its_ids_from_it_until_it_is_taken_away() {
        let id = uuid::Uuid::from_u128(7);
        set_id_source(Some(Box::new(move || id)));
        assert_eq!((new_id(), new_id()), (id, id));
        set_id_source(None);
        assert_ne!(new_id(), id);
    }
}
