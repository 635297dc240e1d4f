//! The document being written, and its figures against their targets.

/// The document being written, every figure that has a target, and the
/// figures one section measures for another (a figure is measured once in
/// a run, and quoted from there).
pub(crate) struct Report(
    pub(crate) String,
    Vec<Target>,
    std::collections::BTreeMap<&'static str, f64>,
);

/// A measured figure against its target.
struct Target {
    figure: String,
    measured: String,
    target: String,
    met: bool,
}

impl Report {
    pub(crate) fn new() -> Self {
        Report(String::new(), Vec::new(), Default::default())
    }

    /// Keeps a figure for a later section of the run.
    pub(crate) fn keep(&mut self, name: &'static str, value: f64) {
        self.2.insert(name, value);
    }

    /// A figure an earlier section of this run kept.
    pub(crate) fn kept(&self, name: &str) -> Option<f64> {
        self.2.get(name).copied()
    }

    pub(crate) fn line(&mut self, s: impl AsRef<str>) {
        println!("{}", s.as_ref());
        self.0.push_str(s.as_ref());
        self.0.push('\n');
    }

    pub(crate) fn target(
        &mut self,
        figure: impl Into<String>,
        measured: impl Into<String>,
        target: impl Into<String>,
        met: bool,
    ) {
        self.1.push(Target {
            figure: figure.into(),
            measured: measured.into(),
            target: target.into(),
            met,
        });
    }

    /// Each figure's row of the targets table.
    pub(crate) fn target_rows(&self) -> Vec<String> {
        self.1
            .iter()
            .map(|t| {
                format!(
                    "| {} | {} | {} | {} |",
                    t.figure,
                    t.measured,
                    t.target,
                    if t.met { "yes" } else { "**no**" }
                )
            })
            .collect()
    }
}

/// The median of `xs` (sorted in place); panics on an empty sample, so a
/// figure that could not be measured fails the run instead of reading 0.
pub(crate) fn median(xs: &mut [f64], what: &str) -> f64 {
    assert!(!xs.is_empty(), "no sample of {what} could be measured");
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

/// Every figure that has a target: what was measured, the target, met or
/// not. No causes: those are the reader's to find.
pub(crate) fn assess(r: &mut Report) {
    r.line("\n## Against the targets\n");
    r.line("| figure | measured | target | met |");
    r.line("| --- | --- | --- | --- |");
    for row in r.target_rows() {
        r.line(row);
    }
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().next().map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<f64>()
                    .unwrap_or(0.0)
                    / 1024.0
                    / 1024.0
            })
        })
        .unwrap_or(0.0);
    format!(
        "{cpu}, {cores} cores, {mem:.0} GiB; moto (`moto_server`, Python) on loopback as the S3 endpoint"
    )
}
