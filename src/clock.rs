//! Time, injected: the protocol's deadlines and expiries are judged by a
//! [`Clock`], so tests set the time instead of sleeping.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

/// The source of "now" for the protocol and the in-memory store.
pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to. Clones share one time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<DateTime<Utc>>>);

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock(Arc::new(Mutex::new(start)))
    }

    /// A fixed, round starting point: 2026-01-27T12:00:00Z.
    pub fn at_epoch() -> Self {
        Self::new(DateTime::from_timestamp(1_769_515_200, 0).unwrap_or_default())
    }

    pub fn set(&self, t: DateTime<Utc>) {
        *self.lock() = t;
    }

    pub fn advance(&self, by: Duration) {
        let mut t = self.lock();
        *t += by;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DateTime<Utc>> {
        // A poisoned clock is still a valid time.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.lock()
    }
}
