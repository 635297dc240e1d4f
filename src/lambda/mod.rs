//! Lambda event adapters: plain async functions over the library, tested
//! directly with `LambdaEvent::new(event, Context::default())`; the binaries
//! in `src/bin/` only wire them to the runtime.

pub mod schedule;

/// JSON log lines through tracing, for every function.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_current_span(false)
        .with_target(false)
        .without_time()
        .try_init();
}
