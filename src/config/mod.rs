//! Configuration: the protocol's knobs ([`Settings`], src/config/
//! settings.rs) and the environment that sets them ([`Config::from_env`],
//! src/config/env.rs; the README, "Configuration").

mod env;
mod settings;

pub use crate::due_sender::DueOrder;
pub use env::{Config, RecordEvents, TESTING_CONDITIONS_VAR};
pub use settings::{
    ClockCheck, Conditions, ConfigError, EVENT_DELIVERY_MARGIN, IfTaskFailed, LATE_WRITE_MARGIN,
    ListOrder, MAX_BATCH_TASKS_LIMIT, MAX_CLOCK_OFFSET, MAX_PASS_CONCURRENCY, MAX_SCHEMA_CACHE,
    MAX_SQS_DELAY, NO_SCHEMAS_BUILD, RetryPolicy, Settings,
};
