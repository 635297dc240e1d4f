//! Time, injected: the protocol's deadlines and expiries are judged by a
//! [`Clock`], so tests set the time instead of sleeping.

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Duration, Utc};

/// The source of "now" for the protocol and the in-memory store.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
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
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> Self {
        ManualClock(Arc::new(Mutex::new(start)))
    }

    /// A fixed, round starting point: 2026-01-27T12:00:00Z.
    pub fn at_epoch() -> Self {
        Self::new(DateTime::from_timestamp(1_769_515_200, 0).unwrap_or_default())
    }

    /// Sets the time to `t`.
    pub fn set(&self, t: DateTime<Utc>) {
        *self.lock() = t;
    }

    /// Moves the time on by `by`.
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

/// How far the storage's clock stands from ours: storage time − local time
/// lies in `[low, high]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offset {
    /// The least the offset can be, given the answers' round trips.
    pub low: Duration,
    /// The most the offset can be.
    pub high: Duration,
}

impl Offset {
    /// The largest offset the bounds allow, either way.
    pub fn magnitude(&self) -> Duration {
        self.low.abs().max(self.high.abs())
    }
}

impl std::fmt::Display for Offset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:+.3} s to {:+.3} s",
            self.low.num_milliseconds() as f64 / 1000.0,
            self.high.num_milliseconds() as f64 / 1000.0
        )
    }
}

/// The storage's clock as its answers showed it (docs/protocol.md, "S3's clock, not ours": the
/// finish deadline is judged in S3's time, not the machine's). Each answer
/// carries its `Date` (whole seconds): it was made at a storage time in
/// `[date, date + 1 s)`, at a local time between sending the request and
/// reading the answer, so the offset lies in `[date − received, date + 1 s −
/// sent]`. The latest answer's bounds replace the last ones: intersecting
/// answers would narrow the bounds below a second, but a local clock that
/// drifts or is stepped by less than the bounds' width would then leave them
/// wrong (excluding the true offset) with nothing to show it, while one
/// answer's bounds always hold the offset at its time. Every decision takes
/// the safe side of a second-wide interval instead.
#[derive(Debug, Default)]
pub struct OffsetEstimate(Mutex<Option<Offset>>);

impl OffsetEstimate {
    /// Takes in one answer: sent at `sent`, received at `received` (local
    /// times), dated `date` by the storage.
    pub fn observe(&self, sent: DateTime<Utc>, received: DateTime<Utc>, date: DateTime<Utc>) {
        let sample = Offset {
            low: date - received,
            high: date + Duration::seconds(1) - sent,
        };
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(sample);
    }

    /// `None` until the first answer.
    pub fn get(&self) -> Option<Offset> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64, millis: i64) -> DateTime<Utc> {
        ManualClock::at_epoch().now() + Duration::seconds(secs) + Duration::milliseconds(millis)
    }

    #[test]
    fn an_offset_is_unknown_until_the_first_answer_then_bounded_by_it() {
        let e = OffsetEstimate::default();
        assert_eq!(e.get(), None);
        // Sent at 0.2 s, answered at 0.3 s, dated 10 s: S3 is 9.7 s to 10.8 s ahead.
        e.observe(at(0, 200), at(0, 300), at(10, 0));
        let o = e.get().unwrap();
        assert_eq!(
            (o.low, o.high),
            (Duration::milliseconds(9700), Duration::milliseconds(10800))
        );
        assert_eq!(o.magnitude(), Duration::milliseconds(10800));
    }

    #[test]
    fn each_answer_replaces_the_bounds_so_a_clock_stepped_by_under_a_second_is_seen_at_once() {
        let e = OffsetEstimate::default();
        e.observe(at(0, 200), at(0, 300), at(10, 0)); // [9.7, 10.8]
        // Our clock was stepped 0.6 s back: this answer's bounds overlap the
        // last, but only its own hold the offset now.
        e.observe(at(1, 0), at(1, 100), at(11, 0)); // [9.9, 11.0]
        let o = e.get().unwrap();
        assert_eq!(
            (o.low, o.high),
            (Duration::milliseconds(9900), Duration::seconds(11))
        );
        // Stepped a minute back.
        e.observe(at(2, 0), at(2, 100), at(72, 0)); // [69.9, 71.0]
        let o = e.get().unwrap();
        assert_eq!(
            (o.low, o.high),
            (Duration::milliseconds(69900), Duration::seconds(71))
        );
        // Behind, too.
        e.observe(at(100, 0), at(100, 0), at(40, 0));
        let o = e.get().unwrap();
        assert_eq!(
            (o.low, o.high),
            (Duration::seconds(-60), Duration::seconds(-59))
        );
        assert_eq!(o.magnitude(), Duration::seconds(60));
    }
}
