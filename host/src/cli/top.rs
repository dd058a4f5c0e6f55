//! `kubewasm top`: what each plugin of a running host costs, refreshed: CPU, calls and their
//! 95th percentile, queue, memory (now and at peak), writes, HTTP and state, as rates over
//! the last interval from two readings of its `/status`.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use kubewasm::histogram::{BUCKETS, HistogramSnapshot};
use kubewasm::plugins::PluginStatus;
use kubewasm::serve::Status;

use super::status::fetch;

/// Arguments of `kubewasm top`.
#[derive(clap::Args)]
pub struct TopArgs {
    /// Address of the host's endpoints (its `metricsAddress`).
    #[arg(
        long,
        default_value = "127.0.0.1:9090",
        env = "KUBEWASM_METRICS_ADDRESS"
    )]
    address: String,
    /// Seconds between readings.
    #[arg(long, default_value_t = 2.0)]
    every: f64,
    /// Print one table (two readings one interval apart) and exit.
    #[arg(long)]
    once: bool,
    /// The column the plugins are ordered by, highest first.
    #[arg(long, value_enum, default_value_t = SortBy::Cpu)]
    sort: SortBy,
}

/// What `kubewasm top` orders plugins by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SortBy {
    /// CPU of its calls and the host's work for it.
    Cpu,
    /// Calls a second.
    Calls,
    /// Linear memory of its instance now.
    Memory,
    /// Writes a second.
    Writes,
}

/// One plugin's line: rates over the interval, levels at its end.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The plugin.
    pub name: String,
    /// CPU used, in percent of one core.
    pub cpu_percent: f64,
    /// Calls into it a second (every kind).
    pub calls_per_second: f64,
    /// The bucket bound its calls' 95th percentile fell under in the interval, if it had any.
    pub p95: Option<Duration>,
    /// Events waiting in its queue.
    pub queued: usize,
    /// Seconds the oldest of them has waited.
    pub oldest_seconds: f64,
    /// Linear memory of its instance now, and the most one held.
    pub memory_bytes: u64,
    /// The most linear memory one of its instances held after a call.
    pub peak_bytes: u64,
    /// Writes accepted a second.
    pub writes_per_second: f64,
    /// Failed attempts and refused writes a second.
    pub failures_per_second: f64,
    /// HTTP requests sent a second.
    pub http_per_second: f64,
    /// Bytes of its state.
    pub state_bytes: usize,
}

/// The rows for each plugin running at `after`, from the change since `before`, `elapsed`
/// apart. A plugin replaced in between is measured from zero (its counters are its version's).
pub fn rows(before: &Status, after: &Status, elapsed: Duration) -> Vec<Row> {
    let seconds = elapsed.as_secs_f64().max(1e-3);
    after
        .plugins
        .iter()
        .map(|now| {
            let was = before
                .plugins
                .iter()
                .find(|p| p.name == now.name && p.digest == now.digest);
            let delta =
                |f: fn(&PluginStatus) -> u64| now_minus(f(now), was.map(f)) as f64 / seconds;
            let empty = HistogramSnapshot::default();
            let window = difference(&now.durations, was.map_or(&empty, |w| &w.durations));
            Row {
                name: now.name.clone(),
                cpu_percent: delta(|p| p.cpu_us) / 1e4,
                calls_per_second: window.count as f64 / seconds,
                p95: quantile(&window, 0.95),
                queued: now.queued,
                oldest_seconds: now.queued_oldest_ms as f64 / 1e3,
                memory_bytes: now.memory_bytes,
                peak_bytes: now.memory_peak_bytes,
                writes_per_second: delta(|p| p.writes_sent),
                failures_per_second: delta(|p| p.failed + p.writes_failed),
                http_per_second: delta(|p| p.http_sent),
                state_bytes: now.state_bytes,
            }
        })
        .collect()
}

/// A wait for the table: `-` for none, then seconds, minutes or hours.
fn seconds(s: f64) -> String {
    match s {
        s if s <= 0.0 => "-".into(),
        s if s < 60.0 => format!("{s:.1}s"),
        s if s < 3600.0 => format!("{:.0}m", s / 60.0),
        s => format!("{:.0}h", s / 3600.0),
    }
}

/// `now` less `was`, or `now` when there was nothing before (or the counter went back).
fn now_minus(now: u64, was: Option<u64>) -> u64 {
    now.checked_sub(was.unwrap_or(0)).unwrap_or(now)
}

/// The observations `now` holds beyond `was`.
fn difference(now: &HistogramSnapshot, was: &HistogramSnapshot) -> HistogramSnapshot {
    let gone_back = now.count < was.count;
    let was_or_none = |i: usize| {
        if gone_back {
            0
        } else {
            was.cumulative.get(i).copied().unwrap_or(0)
        }
    };
    HistogramSnapshot {
        cumulative: now
            .cumulative
            .iter()
            .enumerate()
            .map(|(i, n)| n.saturating_sub(was_or_none(i)))
            .collect(),
        count: if gone_back {
            now.count
        } else {
            now.count - was.count
        },
        sum_nanos: now
            .sum_nanos
            .saturating_sub(if gone_back { 0 } else { was.sum_nanos }),
    }
}

/// The least bucket bound at or under which a `q` share of `h`'s observations fall; none
/// without observations, the largest bound when the share lies beyond it.
fn quantile(h: &HistogramSnapshot, q: f64) -> Option<Duration> {
    if h.count == 0 {
        return None;
    }
    let wanted = (h.count as f64 * q).ceil() as u64;
    let bound = BUCKETS
        .iter()
        .zip(&h.cumulative)
        .find(|(_, n)| **n >= wanted)
        .map_or(BUCKETS[BUCKETS.len() - 1], |(b, _)| *b);
    Some(Duration::from_secs_f64(bound))
}

/// The table: a header line, then one line per plugin ordered by `sort`.
pub fn render(mut rows: Vec<Row>, sort: SortBy, title: &str) -> String {
    let key = |r: &Row| match sort {
        SortBy::Cpu => r.cpu_percent,
        SortBy::Calls => r.calls_per_second,
        SortBy::Memory => r.memory_bytes as f64,
        SortBy::Writes => r.writes_per_second,
    };
    rows.sort_by(|a, b| key(b).total_cmp(&key(a)).then_with(|| a.name.cmp(&b.name)));
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut out = format!("{title}\n");
    let _ = writeln!(
        out,
        "{:<24} {:>6} {:>9} {:>8} {:>6} {:>7} {:>8} {:>8} {:>8} {:>8} {:>7} {:>9}",
        "PLUGIN",
        "CPU%",
        "CALLS/s",
        "P95",
        "QUEUE",
        "OLDEST",
        "MEM MiB",
        "PEAK MiB",
        "WRITES/s",
        "FAILS/s",
        "HTTP/s",
        "STATE KiB"
    );
    for r in &rows {
        let p95 = match r.p95 {
            Some(d) if d < Duration::from_millis(1) => format!("≤{}µs", d.as_micros()),
            Some(d) => format!("≤{}ms", d.as_millis()),
            None => "-".into(),
        };
        let _ = writeln!(
            out,
            "{:<24} {:>6.1} {:>9.1} {:>8} {:>6} {:>7} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>7.1} {:>9.1}",
            r.name.chars().take(24).collect::<String>(),
            r.cpu_percent,
            r.calls_per_second,
            p95,
            r.queued,
            seconds(r.oldest_seconds),
            mib(r.memory_bytes),
            mib(r.peak_bytes),
            r.writes_per_second,
            r.failures_per_second,
            r.http_per_second,
            r.state_bytes as f64 / 1024.0
        );
    }
    out
}

/// `kubewasm top`.
pub async fn top(args: TopArgs) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.every.is_finite() && args.every >= 0.1,
        "--every {}: at least 0.1 seconds",
        args.every
    );
    let every = Duration::from_secs_f64(args.every);
    let mut before = (fetch(&args.address).await?, Instant::now());
    loop {
        tokio::time::sleep(every).await;
        let after = (fetch(&args.address).await?, Instant::now());
        let title = format!(
            "kubewasm top: {} every {:.1} s, by {:?}, {} plugins",
            args.address,
            args.every,
            args.sort,
            after.0.plugins.len()
        )
        .to_lowercase();
        let table = render(
            rows(&before.0, &after.0, after.1 - before.1),
            args.sort,
            &title,
        );
        if args.once {
            print!("{table}");
            return Ok(ExitCode::SUCCESS);
        }
        // Home and clear, then the table: a view that refreshes in place.
        print!("\u{1b}[H\u{1b}[2J{table}");
        before = after;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(name: &str, cpu_us: u64, calls: &[u64], writes: u64) -> PluginStatus {
        // `calls` are cumulative counts per bucket; the last is the count.
        PluginStatus {
            name: name.into(),
            digest: "d1".into(),
            cpu_us,
            writes_sent: writes,
            durations: HistogramSnapshot {
                cumulative: calls.to_vec(),
                count: calls.last().copied().unwrap_or(0),
                sum_nanos: 0,
            },
            memory_bytes: 2 << 20,
            memory_peak_bytes: 3 << 20,
            ..PluginStatus::default()
        }
    }

    fn status(plugins: Vec<PluginStatus>) -> Status {
        Status {
            plugins,
            ..Status::default()
        }
    }

    #[test]
    fn rates_come_from_the_change_between_two_readings() {
        let n = BUCKETS.len();
        let spread = |below_1ms: u64, total: u64| {
            // Bucket 4 is 1 ms: `below_1ms` calls at or under it, the rest under 5 ms.
            (0..n)
                .map(|i| {
                    if i < 4 {
                        0
                    } else if i == 4 {
                        below_1ms
                    } else {
                        total
                    }
                })
                .collect::<Vec<_>>()
        };
        let before = status(vec![plugin("busy", 1_000_000, &spread(100, 100), 10)]);
        let after = status(vec![
            plugin("busy", 1_500_000, &spread(180, 300), 30),
            plugin("new", 20_000, &spread(5, 5), 0),
        ]);
        let rows = rows(&before, &after, Duration::from_secs(2));
        let busy = &rows[0];
        // 0.5 s of CPU in 2 s: 25% of a core; 200 calls: 100 a second; 20 writes: 10 a second.
        assert!((busy.cpu_percent - 25.0).abs() < 1e-9, "{busy:?}");
        assert!((busy.calls_per_second - 100.0).abs() < 1e-9, "{busy:?}");
        assert!((busy.writes_per_second - 10.0).abs() < 1e-9, "{busy:?}");
        // Of the 200 calls in the window, 80 took at most 1 ms: the 95th is under 5 ms.
        assert_eq!(busy.p95, Some(Duration::from_millis(5)));
        // A plugin not seen before counts from zero.
        assert!((rows[1].cpu_percent - 1.0).abs() < 1e-9, "{:?}", rows[1]);
        assert_eq!(rows[1].p95, Some(Duration::from_millis(1)));
        let table = render(rows, SortBy::Cpu, "title");
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "title");
        assert!(lines[1].starts_with("PLUGIN") && lines[1].contains("CPU%"));
        assert!(
            lines[2].starts_with("busy") && lines[2].contains("25.0"),
            "{table}"
        );
        assert!(lines[3].starts_with("new"), "{table}");
        assert!(
            lines[2].contains("2.0") && lines[2].contains("3.0"),
            "memory: {table}"
        );
    }

    #[test]
    fn a_replaced_version_is_measured_from_its_own_start() {
        let before = status(vec![plugin("p", 9_000_000, &[0; 12], 500)]);
        let mut replaced = plugin("p", 100_000, &[0; 12], 4);
        replaced.digest = "d2".into();
        let rows = rows(&before, &status(vec![replaced]), Duration::from_secs(1));
        assert!((rows[0].cpu_percent - 10.0).abs() < 1e-9, "{:?}", rows[0]);
        assert!((rows[0].writes_per_second - 4.0).abs() < 1e-9);
        assert_eq!(rows[0].p95, None, "no calls in the window");
    }
}
