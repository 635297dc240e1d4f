//! Clocks for tests and the bench (the manual one is the library's).

use idempotent_submit::Clock;

/// A clock a fixed time ahead of the system clock: the sweeper's when a
/// record's event reaches it, `STALE_CREATING_AFTER_SECONDS` after the write.
pub struct Ahead(pub chrono::Duration);

impl Clock for Ahead {
    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        chrono::Utc::now() + self.0
    }
}
