//! Cases measured in rounds, side by side: every round gives each case one turn of the same
//! length, so a noisy spell of the shared machine (they last from tens of milliseconds to
//! seconds here, and slow everything down by up to twice) falls on one round of every case
//! rather than on all of one case's samples. A case's figure is the median over rounds of its
//! turn's median; a difference between two cases is taken within each round (the pairs share
//! their spell) before the median.

use std::time::{Duration, Instant};

/// A call to measure, by name.
pub struct Case<'a> {
    /// The name reports use.
    pub name: &'static str,
    /// One call, timed with whatever it drops.
    pub call: Box<dyn FnMut() + 'a>,
}

impl<'a> Case<'a> {
    /// A case named `name` that runs `call`.
    pub fn new(name: &'static str, call: impl FnMut() + 'a) -> Self {
        Self {
            name,
            call: Box::new(call),
        }
    }
}

/// How the rounds run.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    /// Rounds, each one turn per case.
    pub rounds: usize,
    /// The length of one turn.
    pub turn: Duration,
}

impl Plan {
    /// `rounds` rounds of `turn` per case; `KUBEWASM_BENCH_QUICK` cuts the rounds to 5.
    pub fn new(rounds: usize, turn: Duration) -> Self {
        let quick = std::env::var_os("KUBEWASM_BENCH_QUICK").is_some();
        Self {
            rounds: if quick { rounds.min(5) } else { rounds },
            turn,
        }
    }
}

/// The median of `values` (the mean of the middle two for an even count), sorting them.
fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    }
}

/// Samples are batches of calls that take about this long, so the timer's own cost (tens of
/// nanoseconds) stays under a percent of a sample.
const SAMPLE: Duration = Duration::from_micros(20);

/// Runs `cases` under `plan` and prints one line per case: a readable summary, then its figure
/// for each round (nanoseconds per call) as JSON after `ROUNDS `, for `scripts/bench_report.py`.
pub fn run(bench: &str, plan: Plan, cases: &mut [Case<'_>]) {
    // Warm each case for one turn and size its batch from that turn's calls.
    let batches: Vec<usize> = cases
        .iter_mut()
        .map(|case| {
            let start = Instant::now();
            let mut calls = 0u64;
            while start.elapsed() < plan.turn {
                (case.call)();
                calls += 1;
            }
            let per_call = plan.turn.as_secs_f64() / calls as f64;
            ((SAMPLE.as_secs_f64() / per_call).ceil() as usize).max(1)
        })
        .collect();
    let mut rounds: Vec<Vec<f64>> = vec![Vec::with_capacity(plan.rounds); cases.len()];
    let mut samples = Vec::new();
    for _ in 0..plan.rounds {
        for ((case, &batch), rounds) in cases.iter_mut().zip(&batches).zip(&mut rounds) {
            samples.clear();
            let turn = Instant::now();
            while turn.elapsed() < plan.turn {
                let start = Instant::now();
                for _ in 0..batch {
                    (case.call)();
                }
                samples.push(start.elapsed().as_nanos() as f64 / batch as f64);
            }
            rounds.push(median(&mut samples));
        }
    }
    println!(
        "{bench}: {} rounds, a turn of {:?} per case each round",
        plan.rounds, plan.turn
    );
    for ((case, batch), rounds_ns) in cases.iter().zip(batches).zip(rounds) {
        let mut sorted = rounds_ns.clone();
        let median_ns = median(&mut sorted);
        println!(
            "{:<24} median {:>12.1} ns   rounds {:.1} to {:.1} ns   ({batch} calls a sample)",
            case.name,
            median_ns,
            sorted[0],
            sorted[sorted.len() - 1],
        );
        let json = serde_json::json!({
            "bench": bench,
            "name": case.name,
            "rounds_ns": rounds_ns,
        });
        println!("ROUNDS {json}");
    }
}
