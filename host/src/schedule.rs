//! When a plugin's schedule is due: standard five-field cron (minute, hour, day of month,
//! month, day of week; `*`, lists, ranges, steps, month and day names), `@every 30s`, and the
//! `@hourly`-style shorthands, in UTC or an IANA time zone (jiff's database).

use std::fmt;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Span, Timestamp, ToSpan, Zoned};

/// Shortest `@every` interval.
pub const MIN_EVERY_SECONDS: u64 = 1;

/// A parsed schedule.
#[derive(Clone)]
pub enum Cron {
    /// Fixed intervals from a start.
    Every(std::time::Duration),
    /// Five cron fields, each the set of values it allows.
    Fields {
        /// Bit `m` set when minute `m` is allowed.
        minutes: u64,
        /// Hours 0 to 23.
        hours: u32,
        /// Days of the month 1 to 31.
        days: u32,
        /// Months 1 to 12.
        months: u16,
        /// Days of the week 0 (Sunday) to 6.
        weekdays: u8,
        /// Both day fields restricted: either matches (cron's rule).
        either_day: bool,
        /// The zone the fields are read in.
        zone: TimeZone,
    },
}

impl fmt::Debug for Cron {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cron::Every(d) => write!(f, "every {d:?}"),
            Cron::Fields { .. } => f.write_str("cron fields"),
        }
    }
}

/// Why a schedule does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    /// An IANA time zone this machine does not know.
    #[error("time zone {zone:?}: {why}")]
    Zone {
        /// The zone named.
        zone: String,
        /// What the time zone database said.
        why: String,
    },
    /// Neither five fields nor a shorthand.
    #[error("{0:?} is not five cron fields (minute hour day-of-month month day-of-week) or @every")]
    NotFiveFields(String),
    /// One of the five fields is wrong.
    #[error("{field}: {problem}")]
    Field {
        /// Which field: `minute`, `hour`, `day of month`, `month` or `day of week`.
        field: &'static str,
        /// What is wrong with it.
        problem: FieldProblem,
    },
    /// An `@every` period is wrong.
    #[error("@every {text:?}: {problem}")]
    Every {
        /// The period as written.
        text: String,
        /// What is wrong with it.
        problem: EveryProblem,
    },
}

/// What is wrong with one cron field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldProblem {
    /// A value that is neither a number nor a name.
    #[error("{0:?} is not a number")]
    NotANumber(String),
    /// A value outside the field's range.
    #[error("{value} is outside {min}-{max}")]
    Outside {
        /// The value.
        value: u32,
        /// The field's least value.
        min: u32,
        /// The field's greatest value.
        max: u32,
    },
    /// A step of zero, or not a number.
    #[error("step {0:?} is not a positive number")]
    Step(String),
    /// A range whose end comes before its start.
    #[error("range {0:?} runs backwards")]
    Backwards(String),
}

/// What is wrong with an `@every` period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum EveryProblem {
    /// No number before the unit.
    #[error("write a number and a unit (30s, 5m, 2h)")]
    NoNumber,
    /// A unit other than s, m or h.
    #[error("the unit is s, m or h")]
    Unit,
    /// Shorter than the least period.
    #[error("at least {MIN_EVERY_SECONDS} s")]
    TooShort,
}

fn field(text: &str, min: u32, max: u32, names: &[&str]) -> Result<u64, FieldProblem> {
    let value = |t: &str| -> Result<u32, FieldProblem> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(t)) {
            return Ok(min + u32::try_from(i).unwrap_or(0));
        }
        let v: u32 = t
            .parse()
            .map_err(|_| FieldProblem::NotANumber(t.to_owned()))?;
        // Day of week 7 is Sunday too.
        let v = if max == 6 && v == 7 { 0 } else { v };
        if v < min || v > max {
            return Err(FieldProblem::Outside { value: v, min, max });
        }
        Ok(v)
    };
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                s.parse::<u32>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| FieldProblem::Step(s.to_owned()))?,
            ),
            None => (part, 1),
        };
        let (from, to) = match range {
            "*" => (min, max),
            r => match r.split_once('-') {
                Some((a, b)) => (value(a)?, value(b)?),
                None => {
                    let v = value(r)?;
                    (v, if step > 1 { max } else { v })
                }
            },
        };
        if from > to {
            return Err(FieldProblem::Backwards(range.to_owned()));
        }
        let mut v = from;
        while v <= to {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok(bits)
}

fn every(text: &str) -> Result<std::time::Duration, CronError> {
    let fail = |problem| CronError::Every {
        text: text.to_owned(),
        problem,
    };
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number.parse().map_err(|_| fail(EveryProblem::NoNumber))?;
    let seconds = match unit {
        "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        _ => return Err(fail(EveryProblem::Unit)),
    };
    if seconds < MIN_EVERY_SECONDS {
        return Err(fail(EveryProblem::TooShort));
    }
    Ok(std::time::Duration::from_secs(seconds))
}

impl Cron {
    /// Parses `text` for time zone `zone` (an IANA name; none: UTC).
    pub fn parse(text: &str, zone: Option<&str>) -> Result<Self, CronError> {
        let text = text.trim();
        let zone = match zone {
            None => TimeZone::UTC,
            Some(name) => TimeZone::get(name).map_err(|e| CronError::Zone {
                zone: name.to_owned(),
                why: e.to_string(),
            })?,
        };
        if let Some(rest) = text.strip_prefix("@every ") {
            return Ok(Cron::Every(every(rest.trim())?));
        }
        let text = match text {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other => other,
        };
        let parts: Vec<&str> = text.split_whitespace().collect();
        let [m, h, dom, mon, dow] = parts[..] else {
            return Err(CronError::NotFiveFields(text.to_owned()));
        };
        const MONTHS: [&str; 12] = [
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ];
        const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
        let named = |field: &'static str, r: Result<u64, FieldProblem>| {
            r.map_err(|problem| CronError::Field { field, problem })
        };
        Ok(Cron::Fields {
            minutes: named("minute", field(m, 0, 59, &[]))?,
            hours: named("hour", field(h, 0, 23, &[]))? as u32,
            days: named("day of month", field(dom, 1, 31, &[]))? as u32,
            months: named("month", field(mon, 1, 12, &MONTHS))? as u16,
            weekdays: named("day of week", field(dow, 0, 6, &DAYS))? as u8,
            either_day: dom != "*" && dow != "*",
            zone,
        })
    }

    /// The first time after `after` the schedule is due.
    pub fn next_after(&self, after: Timestamp) -> Option<Timestamp> {
        match self {
            Cron::Every(d) => {
                let span = Span::try_from(*d).ok()?;
                after.checked_add(span).ok()
            }
            Cron::Fields {
                minutes,
                hours,
                days,
                months,
                weekdays,
                either_day,
                zone,
            } => {
                let start = after.to_zoned(zone.clone());
                let mut t: DateTime = start
                    .datetime()
                    .checked_add(1.minute())
                    .ok()?
                    .with()
                    .second(0)
                    .subsec_nanosecond(0)
                    .build()
                    .ok()?;
                // At most four years of minutes are looked at, day by day where a day fails.
                for _ in 0..(366 * 4 * 24 * 60) {
                    let month_ok = months & (1 << t.month()) != 0;
                    let dom_ok = days & (1 << t.day()) != 0;
                    let dow_ok = weekdays & (1 << t.weekday().to_sunday_zero_offset()) != 0;
                    let day_ok = if *either_day {
                        dom_ok || dow_ok
                    } else {
                        dom_ok && dow_ok
                    };
                    if !(month_ok && day_ok) {
                        t = t
                            .date()
                            .checked_add(1.day())
                            .ok()?
                            .to_datetime(jiff::civil::time(0, 0, 0, 0));
                        continue;
                    }
                    if hours & (1 << t.hour()) == 0 {
                        t = t
                            .checked_add(1.hour())
                            .ok()?
                            .with()
                            .minute(0)
                            .build()
                            .ok()?;
                        continue;
                    }
                    if minutes & (1 << t.minute()) == 0 {
                        t = t.checked_add(1.minute()).ok()?;
                        continue;
                    }
                    let zoned: Zoned = t.to_zoned(zone.clone()).ok()?;
                    let due = zoned.timestamp();
                    if due > after {
                        return Some(due);
                    }
                    t = t.checked_add(1.minute()).ok()?;
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("a timestamp")
    }

    fn next(cron: &str, zone: Option<&str>, after: &str) -> String {
        Cron::parse(cron, zone)
            .expect("parses")
            .next_after(at(after))
            .expect("due")
            .to_string()
    }

    #[test]
    fn five_fields_and_shorthands_are_due_when_cron_says() {
        assert_eq!(
            next("*/5 * * * *", None, "2026-11-28T10:02:30Z"),
            "2026-11-28T10:05:00Z"
        );
        assert_eq!(
            next("0 2 * * *", None, "2026-11-28T10:02:30Z"),
            "2026-11-29T02:00:00Z"
        );
        assert_eq!(
            next("30 9 * * mon-fri", None, "2026-11-28T10:00:00Z"),
            "2026-11-30T09:30:00Z"
        );
        assert_eq!(
            next("0 0 1 jan *", None, "2026-11-28T10:00:00Z"),
            "2027-01-01T00:00:00Z"
        );
        assert_eq!(
            next("@hourly", None, "2026-11-28T10:00:00Z"),
            "2026-11-28T11:00:00Z"
        );
        // Both day fields restricted: either matches.
        assert_eq!(
            next("0 0 13 * 5", None, "2026-11-28T10:00:00Z"),
            "2026-12-04T00:00:00Z"
        );
        assert_eq!(
            next("@every 30s", None, "2026-11-28T10:00:00Z"),
            "2026-11-28T10:00:30Z"
        );
        // In a time zone: 09:00 in Paris is 08:00 UTC in winter.
        assert_eq!(
            next("0 9 * * *", Some("Europe/Paris"), "2026-11-28T10:00:00Z"),
            "2026-11-29T08:00:00Z"
        );
    }

    #[test]
    fn malformed_schedules_say_what_is_wrong() {
        for (text, says) in [
            ("* * * *", "five cron fields"),
            ("61 * * * *", "minute"),
            ("* * * 13 *", "month"),
            ("*/0 * * * *", "step"),
            ("@every 10x", "unit"),
            ("@every 0s", "at least"),
            ("5-1 * * * *", "backwards"),
        ] {
            let e = Cron::parse(text, None).expect_err(text).to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
        let e = Cron::parse("* * * * *", Some("Mars/Olympus")).expect_err("zone");
        assert!(
            matches!(&e, CronError::Zone { zone, .. } if zone == "Mars/Olympus"),
            "{e}"
        );
    }
}
