//! A run's figures, as the markdown docs/reliability.md carries.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::Ordering;

use super::producers::{Door, Kind};
use super::world::{Report, by_door};
use crate::common::lambda_pool::kills_by_moment;

fn ms(v: Option<f64>) -> String {
    v.map_or("–".into(), |v| format!("{v:.0}"))
}

impl Report {
    /// Submits the function handled (answered 2xx or 4xx, or an SQS
    /// message taken), and those it accepted (201/200, or a valid SQS
    /// message taken), each counted once.
    pub fn handled_and_accepted(&self) -> (usize, usize) {
        let l = &self.ledger;
        let mut handled = std::collections::HashSet::new();
        let mut accepted = std::collections::HashSet::new();
        for a in &l.answers {
            if (200..500).contains(&a.status) {
                handled.insert(a.item);
            }
            if matches!(a.status, 200 | 201) {
                accepted.insert(a.item);
            }
        }
        for (i, it) in l.items.iter().enumerate() {
            if let Some(m) = &it.message_id
                && l.sqs_taken.contains_key(m)
            {
                handled.insert(i);
                if it.valid && it.kind != Kind::Conflict {
                    accepted.insert(i);
                }
            }
        }
        (handled.len(), accepted.len())
    }

    pub fn markdown(&self) -> String {
        let mut o = String::new();
        self.head(&mut o);
        self.doors(&mut o);
        self.traffic(&mut o);
        self.due_queue(&mut o);
        self.audit_and_memory(&mut o);
        o
    }

    /// The run: its seed, its time, its world and its windows.
    fn head(&self, o: &mut String) {
        let c = &self.config;
        let secs = self.produced_for.as_secs_f64();
        let _ = writeln!(
            o,
            "Seed {}, {:.0} s of producing ({:.0} s in all, audit included), on {} with {} events{}{}; \
             {} `submit` and {} `sweep` environments ({}), {} producers, {} buquet workers; \
             faults on {}‰ of the functions' requests, latency spikes on {}‰ (up to {} ms); \
             windows: stale {} s, finish {} s (late writes {} s, due messages {} s late at most, \
             operation deadline {} s). The machine's load average was {} when the world started \
             and {} when its producers stopped (2 cores).\n",
            c.seed,
            secs,
            self.total.as_secs_f64(),
            c.store.name,
            match c.events {
                super::world::Events::Bucket => "bucket",
                super::world::Events::Submitter => "submitter",
            },
            match (c.events, c.with_claim) {
                (super::world::Events::Submitter, true) => " (`DUE_MESSAGE=with_claim`)",
                (super::world::Events::Submitter, false) => " (`DUE_MESSAGE=before_claim`)",
                _ => "",
            },
            if c.passes_while_producing {
                ""
            } else {
                ", no scheduled pass until every window had closed"
            },
            c.submit_envs,
            c.sweep_envs,
            c.submit_bin.display(),
            c.producers,
            c.workers,
            c.fault_per_mille,
            c.spikes.0,
            c.spikes.1,
            c.windows.stale,
            c.windows.finish,
            c.windows.late_write,
            c.windows.event_delivery,
            c.windows.operation,
            self.load.0,
            self.load.1,
        );
    }

    /// Keys, submits and doors: what was sent and held.
    fn doors(&self, o: &mut String) {
        let l = &self.ledger;
        let secs = self.produced_for.as_secs_f64();
        let (handled, accepted) = self.handled_and_accepted();
        // Keys, submits and doors.
        let _ = writeln!(
            o,
            "| submits | {} |",
            by_door(l)
                .iter()
                .map(|(d, _)| d.name())
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(o, "| --- |{}", " ---: |".repeat(3));
        let kinds = [
            Kind::New,
            Kind::SequentialDuplicate,
            Kind::ConcurrentDuplicate,
            Kind::Conflict,
            Kind::Keyless,
            Kind::Options,
            Kind::Invalid,
        ];
        for k in kinds {
            let row: Vec<String> = [Door::Http, Door::Batch, Door::Sqs]
                .iter()
                .map(|d| {
                    l.items
                        .iter()
                        .filter(|i| i.door == *d && i.kind == k)
                        .count()
                        .to_string()
                })
                .collect();
            let _ = writeln!(o, "| {} | {} |", k.name(), row.join(" | "));
        }
        let row: Vec<String> = by_door(l).iter().map(|(_, n)| n.to_string()).collect();
        let _ = writeln!(o, "| **all** | {} |", row.join(" | "));
        let inv: Vec<String> = [Door::Http, Door::Batch, Door::Sqs]
            .iter()
            .map(|d| l.invocations.get(d).copied().unwrap_or(0).to_string())
            .collect();
        let _ = writeln!(
            o,
            "| invocations (retries included) | {} |\n",
            inv.join(" | ")
        );
        let a = &self.audit;
        let _ = writeln!(
            o,
            "{} submits sent ({:.1}/s); {} handled (answered 2xx or 4xx, or an SQS message taken): \
             **{:.1} submits/s held**, {} accepted ({:.1}/s); {} keys, {} records, {} tasks, {} runs; \
             {} given up by their producer (after 8 attempts, or 10 s after the producers' end), {} after a killed invocation (half of the HTTP \
             and batch clients that hear of a kill give up); {} keys replayed once more at the end. \
             The store served {:.0} requests/s while the producers ran \
             ({} requests: {} the functions', {} the workers', {} the due queue's), {} in all.\n",
            l.items.len(),
            l.items.len() as f64 / secs,
            handled,
            handled as f64 / secs,
            accepted,
            accepted as f64 / secs,
            a.keys,
            a.records,
            a.tasks,
            a.runs,
            l.given_up,
            l.abandoned,
            self.final_replays,
            self.store_requests_in_production as f64 / secs,
            self.store_requests_in_production,
            self.requests_by_client.0,
            self.requests_by_client.1,
            self.requests_by_client.2,
            self.store_requests_total,
        );
    }

    /// Where the store's requests went, latency, kills and faults.
    fn traffic(&self, o: &mut String) {
        let l = &self.ledger;
        // Where the store's requests went.
        let _ = writeln!(
            o,
            "| requests forwarded while the producers ran | client | count |"
        );
        let _ = writeln!(o, "| --- | --- | ---: |");
        for ((client, kind), n) in &self.requests_by_kind {
            let _ = writeln!(o, "| {kind} | {client} | {n} |");
        }
        let _ = writeln!(o);

        // Latency.
        let _ = writeln!(o, "| latency under faults (ms) | invocations | p50 | p99 |");
        let _ = writeln!(o, "| --- | ---: | ---: | ---: |");
        for d in [Door::Http, Door::Batch, Door::Sqs] {
            let lat = l.latency.get(&d).cloned().unwrap_or_default();
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} |",
                d.name(),
                lat.0.len(),
                ms(lat.quantile(0.5)),
                ms(lat.quantile(0.99))
            );
        }
        let _ = writeln!(o);

        // Kills.
        let _ = writeln!(o, "| processes killed (SIGKILL) | moment | kills |");
        let _ = writeln!(o, "| --- | --- | ---: |");
        for ((f, m), n) in kills_by_moment(&self.kills) {
            let _ = writeln!(o, "| `{f}` | {m} | {n} |");
        }
        let _ = writeln!(
            o,
            "\n{} kills; {} processes started in all (each kill's replacement included); \
             {} invocations killed, {} timed out; {} processes ended by themselves, {} init errors.\n",
            self.kills.len(),
            self.starts,
            l.killed_invocations,
            l.timed_out,
            self.exits,
            self.init_errors
        );

        // Faults.
        let _ = writeln!(o, "| faults injected | count |");
        let _ = writeln!(o, "| --- | ---: |");
        for (k, n) in &self.faults_by_kind {
            let _ = writeln!(o, "| {k} | {n} |");
        }
        let _ = writeln!(
            o,
            "| latency spikes ({:.1} s held in all) | {} |\n",
            self.spike_ms as f64 / 1000.0,
            self.spikes
        );
    }

    /// The due queue and the passes: what finished interrupted submits, and how late due messages came.
    fn due_queue(&self, o: &mut String) {
        let c = &self.config;
        // The due queue and the passes.
        let s = &self.sweep;
        let _ = writeln!(
            o,
            "Interrupted submits finished: {} by `sweep` on their due message, {} by a scheduled pass, \
             {} by a later submit of their key (`recovered`, as the HTTP and batch doors log it); the due path met {} records past their \
             deadline and counted {} errors.\n",
            self.finished_by_due,
            self.finished_by_passes_logged,
            self.recovered_by_submits,
            self.due_past_deadline,
            self.due_errors,
        );
        let _ = writeln!(
            o,
            "Due queue: {} messages received, {} taken, {} handed back, {} in batches whose `sweep` \
             was killed; {} scheduled passes ({} busy, {} failed), {} records finished by them, \
             {} orphan payloads and {} stale markers deleted by them.\n",
            s.received.load(Ordering::SeqCst),
            s.acked.load(Ordering::SeqCst),
            s.handed_back.load(Ordering::SeqCst),
            s.lost_to_kills.load(Ordering::SeqCst),
            s.passes.load(Ordering::SeqCst),
            self.passes_busy_logged,
            s.passes_failed.load(Ordering::SeqCst),
            s.finished_by_passes.load(Ordering::SeqCst),
            self.payloads_deleted_logged,
            self.markers_deleted_logged,
        );

        let promise = std::time::Duration::from_secs(c.windows.event_delivery);
        let (n, p50, p99, max, over) = s.lateness(promise);
        let _ = writeln!(
            o,
            "Due messages taken by `sweep`, after their delay: {n}, p50 {:.1} s, p99 {:.1} s, \
             at most {:.1} s; **{over} later than the world promises ({} s)**.\n",
            p50 / 1000.0,
            p99 / 1000.0,
            max / 1000.0,
            c.windows.event_delivery
        );
        if over > 0 {
            let by: Vec<String> = s
                .late_by_minute(promise)
                .iter()
                .enumerate()
                .map(|(m, (all, late))| format!("minute {}: {late} of {all}", m + 1))
                .collect();
            let _ = writeln!(
                o,
                "The late ones by the minute they were sent in (late of all): {}.\n",
                by.join(", ")
            );
        }
    }

    /// The audit's counts, and the processes' peak memory.
    fn audit_and_memory(&self, o: &mut String) {
        let a = &self.audit;
        // The audit.
        let _ = writeln!(o, "| audit | count |");
        let _ = writeln!(o, "| --- | ---: |");
        for (name, n) in a.zero_counts() {
            let _ = writeln!(o, "| {name} | {n} |");
        }
        let _ = writeln!(
            o,
            "| tasks run twice (reported: buquet is at-least-once) | {} |",
            a.tasks_run_twice
        );
        let _ = writeln!(
            o,
            "| payloads without a task, too young for the last pass (reported) | {} |",
            a.young_orphan_payloads
        );
        let _ = writeln!(
            o,
            "| keyless tasks of submits never answered 201, left out of the ready index (reported) | {} |",
            a.unanswered_keyless_tasks_never_run
        );
        let _ = writeln!(
            o,
            "| records of abandoned submits killed between their record and its due message, left to a replay (reported; submitter events only) | {} |",
            a.records_left_to_a_replay_by_a_killed_submitter
        );
        let _ = writeln!(
            o,
            "| markers of keyless submits whose task never landed (reported) | {} |",
            a.markers_of_keyless_tasks_never_written
        );
        let _ = writeln!(
            o,
            "| inputs whose doubles a worker's rewrite moved by one unit in the last place (reported: buquet's, not ours) | {} |\n",
            a.doubles_moved_by_the_worker
        );

        // Memory.
        let mut peaks: BTreeMap<(String, usize), u64> = BTreeMap::new();
        for r in &self.rss {
            let e = peaks.entry((r.function.clone(), r.env)).or_default();
            *e = (*e).max(r.peak_kib);
        }
        let max_submit = self
            .rss
            .iter()
            .filter(|r| r.function == "submit")
            .map(|r| r.peak_kib)
            .max()
            .unwrap_or(0);
        let row: Vec<String> = peaks
            .iter()
            .map(|((f, e), k)| format!("`{f}` {e}: {:.1} MB", *k as f64 / 1024.0))
            .collect();
        let _ = writeln!(
            o,
            "Peak RSS (VmHWM), the largest of each environment's processes ({} processes in all): {}. \
             Largest of any `submit` process: **{:.1} MB**.",
            self.rss.len(),
            row.join(", "),
            max_submit as f64 / 1024.0
        );
    }
}
