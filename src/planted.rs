//! Bugs planted on purpose, one per guarantee, so that the model test
//! (`tests/model.rs`) can show that its checker catches each of them with a
//! shrunk schedule. A bug is switched on per [`Settings`](crate::Settings)
//! (`planted`), and only in a build with the `planted-bugs` feature, which
//! `make test` turns on and no release build has: without it
//! [`Settings::has_bug`](crate::Settings::has_bug) is a constant `false`.

/// One planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// Writes a record's task and marker whatever its finish deadline
    /// (breaks the deadline, so guarantees 2 and 7).
    IgnoreFinishDeadline,
    /// Hashes every key of a scope alike, so one key answers another key's
    /// task (breaks guarantee 1).
    OneRecordPerScope,
    /// A finisher takes the marker for present without checking it, so an
    /// interrupted submit's marker is never written (breaks guarantee 3 and
    /// the ready index's liveness).
    FinishWithoutMarker,
    /// The old rule: a finisher writes the marker whenever its HEAD finds
    /// none, whatever a worker did to the task since (breaks guarantee 10).
    MarkerWhenHeadFindsNone,
    /// A finisher does not read the task again after its marker landed, so a
    /// worker that claimed the task in between leaves our marker stale
    /// (breaks guarantee 10, in a race).
    MarkerUnverified,
    /// Answers `missing` as soon as the finish deadline passes, without the
    /// 15-minute margin for a late write (breaks guarantee 7).
    MissingWithoutMargin,
    /// Writes the task object without If-None-Match (breaks guarantee 2).
    OverwriteTask,
    /// Reads an expired record as live (breaks guarantee 6).
    ExpiryIgnored,
    /// Trusts the machine's clock as S3's, offset zero, whatever S3's
    /// answers show (breaks the deadline when the clock is off).
    TrustMachineClock,
}
