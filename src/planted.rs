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
    /// The sweeper promotes without checking or writing the marker (breaks
    /// "ready only once both were seen", guarantee 3).
    PromoteWithoutMarker,
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
