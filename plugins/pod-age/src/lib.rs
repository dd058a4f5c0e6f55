//! Reports pods stuck in Pending, using each of the ways to be called:
//!
//! - a **change filter** on `/status/phase`: only phase changes reach the plugin, not the
//!   many other status updates of a pod;
//! - a **requeue**: a pod that is Pending but not yet for long is looked at again when it
//!   would have been Pending too long (a delete cancels it; a phase change replaces it);
//! - **synced**: once the initial state is handed over, one line with the pods per phase;
//! - a **schedule** `summary` (every five minutes, on the leading replica): the same line,
//!   with the oldest pending pod. The operator may run it on another schedule
//!   (`schedules: {summary: {cron: "@every 30s"}}` in the plugin's configuration entry).
//!
//! Configuration: `{"pendingSeconds": 300}` (the default).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use kubewasm_sdk::{
    Event, Gvk, HandleError, Manifest, Object, Plugin, Subscription, cache, export_plugin, log,
    triggers,
};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    #[serde(default = "default_pending")]
    pending_seconds: u32,
}

fn default_pending() -> u32 {
    300
}

static CONFIG: OnceLock<Config> = OnceLock::new();

/// Seconds since the Unix epoch of an RFC 3339 UTC time as the API server writes it
/// (`2026-11-28T10:07:00Z`).
fn unix_seconds(text: &str) -> Option<i64> {
    let number = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (y, m, d) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hh, mm, ss) = (number(11..13)?, number(14..16)?, number(17..19)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3_600 + mm * 60 + ss)
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Seconds `pod` has existed.
fn age(pod: &Object) -> Result<i64, HandleError> {
    let created = pod.text("/metadata/creationTimestamp")?.unwrap_or_default();
    Ok(unix_seconds(&created).map_or(0, |t| now() - t))
}

/// Pods per phase, and the oldest pending pod with its age.
fn summary() -> Result<(), HandleError> {
    let mut phases: BTreeMap<String, usize> = BTreeMap::new();
    let mut oldest: Option<(String, i64)> = None;
    for pod in cache::list(&Gvk::pod(), None, None)? {
        let phase = pod
            .text("/status/phase")?
            .unwrap_or_else(|| "Unknown".into());
        if phase == "Pending" {
            let age = age(&pod)?;
            if oldest.as_ref().is_none_or(|(_, a)| age > *a) {
                oldest = Some((pod.key(), age));
            }
        }
        *phases.entry(phase).or_default() += 1;
    }
    let counts: Vec<String> = phases.iter().map(|(p, n)| format!("{p}={n}")).collect();
    let oldest = oldest.map_or_else(|| "none".to_owned(), |(k, a)| format!("{k} ({a}s)"));
    log::info(
        "pods by phase",
        &[("phases", &counts.join(" ")), ("oldest pending", &oldest)],
    );
    Ok(())
}

struct PodAge;

impl Plugin for PodAge {
    fn init(config: &str) -> Result<(), String> {
        let config: Config = kubewasm_sdk::parse_config(config)?;
        let _ = CONFIG.set(config);
        Ok(())
    }

    fn describe() -> Manifest {
        Manifest::new()
            .subscribe(Subscription::to(Gvk::pod()).on_changes(&["/status/phase"]))
            .schedule("summary", "*/5 * * * *")
    }

    fn handle(event: Event<'_>) -> Result<(), HandleError> {
        let (Event::Added(_) | Event::Updated(_) | Event::Requeue(_)) = &event else {
            return Ok(());
        };
        let pod = event.object();
        if pod.text("/status/phase")?.as_deref() != Some("Pending") {
            return Ok(());
        }
        let limit = i64::from(
            CONFIG
                .get()
                .map_or(default_pending(), |c| c.pending_seconds),
        );
        let age = age(pod)?;
        if age >= limit {
            log::warn(
                "pod pending too long",
                &[("pod", &pod.key()), ("seconds", &age.to_string())],
            );
        } else {
            // Look again when it would be pending too long.
            let wait = u32::try_from(limit - age).unwrap_or(u32::MAX);
            triggers::requeue_after(wait).map_err(HandleError::fatal)?;
        }
        Ok(())
    }

    fn synced() -> Result<(), HandleError> {
        summary()
    }

    fn tick(schedule: &str) -> Result<(), HandleError> {
        match schedule {
            "summary" => summary(),
            other => Err(HandleError::fatal(format!("no schedule {other:?}"))),
        }
    }
}

export_plugin!(PodAge);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_server_times_read_as_unix_seconds() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(unix_seconds("2026-11-28T10:07:00Z"), Some(1_795_860_420));
        assert_eq!(unix_seconds("2000-02-29T12:00:01Z"), Some(951_825_601));
        assert_eq!(unix_seconds("not a time"), None);
    }
}
