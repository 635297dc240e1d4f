//! `idem`: the operator CLI. Wiring only; see `idempotent_submit::cli`.

use clap::Parser;
use idempotent_submit::Queue;
use idempotent_submit::cli::{self, Cli};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli = Cli::parse();
    let outcome = match cli::config(&cli) {
        Ok(config) => match Queue::from_config(&config).await {
            Ok(queue) => cli::run(cli.command, &queue, &config).await,
            Err(e) => cli::invalid_configuration(&e),
        },
        Err(o) => o,
    };
    println!("{}", outcome.render());
    std::process::exit(outcome.exit);
}
