//! `idem`: the operator CLI. Wiring only; see `idempotent_submit::cli`.

use clap::Parser;
use idempotent_submit::Queue;
use idempotent_submit::cli::{self, Cli};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let cli = Cli::parse();
    let outcome = match cli::config(&cli) {
        Ok(config) => {
            let queue = Queue::from_config(&config).await;
            cli::run(cli.command, &queue, &config).await
        }
        Err(o) => o,
    };
    println!("{}", outcome.render());
    std::process::exit(outcome.exit);
}
