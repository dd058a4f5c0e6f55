//! Saying how an object is on its status: conditions and fields, written only when they change.
//!
//! A reconcile states the whole status it owns every time ([`Status::condition`],
//! [`Status::field`]); [`Status::apply`] compares it with the object as cached and stages a
//! server-side apply of the `status` subresource (the plugin's field manager) only when a value
//! differs, so a reconcile that finds everything as it was writes nothing and wakes nothing: no
//! status loop. A condition keeps its `lastTransitionTime` while its `status` stays the same.
//! Apply names every field the plugin owns, so a field or condition left out of a later apply
//! is removed: state all of them each time.
//!
//! The rules, shared by the four SDKs, are checked against `plugin-sdk/status-cases.json`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One condition, as Kubernetes' API conventions write it (`metav1.Condition`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// What it is about: `Ready`, `Available`, `Provisioned`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Why, in one CamelCase word.
    pub reason: String,
    /// Why, for people.
    pub message: String,
    /// The `metadata.generation` it was worked out from (leave none for types whose conditions
    /// have no such field, such as a Namespace's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

impl Condition {
    /// A condition of type `kind` that holds (`True`) or does not (`False`).
    pub fn new(kind: &str, holds: bool, reason: &str, message: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            status: if holds { "True" } else { "False" }.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            observed_generation: None,
        }
    }

    /// A condition of type `kind` whose state is not known (`Unknown`).
    pub fn unknown(kind: &str, reason: &str, message: &str) -> Self {
        Self {
            status: "Unknown".to_owned(),
            ..Self::new(kind, false, reason, message)
        }
    }

    /// The same condition, worked out from generation `generation` of the object.
    pub fn observed_generation(mut self, generation: i64) -> Self {
        self.observed_generation = Some(generation);
        self
    }

    /// Whether `current` (a condition as the object has it) already says the same.
    fn same_as(&self, current: &Value) -> bool {
        let text = |name: &str| current.get(name).and_then(Value::as_str);
        text("status") == Some(&self.status)
            && text("reason").unwrap_or("") == self.reason
            && text("message").unwrap_or("") == self.message
            && self.observed_generation.is_none_or(|g| {
                current.get("observedGeneration").and_then(Value::as_i64) == Some(g)
            })
    }
}

/// The status a plugin owns on one object: its conditions and other fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    conditions: Vec<Condition>,
    fields: Map<String, Value>,
}

impl Status {
    /// No condition and no field yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets a condition (replacing one of the same type set before).
    pub fn condition(mut self, condition: Condition) -> Self {
        self.conditions.retain(|c| c.kind != condition.kind);
        self.conditions.push(condition);
        self
    }

    /// Sets the top-level status field `name` (`readyReplicas`, `url`) to `value`.
    pub fn field(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.fields.insert(name.to_owned(), value.into());
        self
    }

    /// The status to apply over `current` (the object's `status`, null when it has none) at
    /// `now` (RFC 3339), or none when `current` already says all of it.
    pub fn changes(&self, current: &Value, now: &str) -> Option<Value> {
        let had = current
            .get("conditions")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        let find = |kind: &str| {
            had.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
        };
        let fields_same = self
            .fields
            .iter()
            .all(|(name, value)| current.get(name) == Some(value));
        let conditions_same = self
            .conditions
            .iter()
            .all(|c| find(&c.kind).is_some_and(|old| c.same_as(old)));
        if fields_same && conditions_same {
            return None;
        }
        let mut status = self.fields.clone();
        if !self.conditions.is_empty() {
            let conditions = self.conditions.iter().map(|c| {
                let since = find(&c.kind)
                    .filter(|old| old.get("status").and_then(Value::as_str) == Some(&c.status))
                    .and_then(|old| old.get("lastTransitionTime"))
                    .and_then(Value::as_str)
                    .unwrap_or(now);
                let mut value = serde_json::to_value(c).unwrap_or_default();
                value["lastTransitionTime"] = Value::from(since);
                value
            });
            status.insert("conditions".to_owned(), conditions.collect());
        }
        Some(Value::Object(status))
    }

    /// Stages a server-side apply of this status to `object`'s `status` subresource unless
    /// the object, as cached, already has it; whether a write was staged. The object must be
    /// read whole or with `/status` among its declared fields.
    pub fn apply(&self, object: &crate::Object) -> Result<bool, crate::HandleError> {
        let current = match object.field("/status")? {
            Some(value) => value.parse::<Value>().map_err(|e| {
                crate::HandleError::fatal(format!("{}: status is not JSON: {e}", object.key()))
            })?,
            None => Value::Null,
        };
        let Some(status) = self.changes(&current, &now()) else {
            return Ok(false);
        };
        let body = serde_json::json!({ "status": status });
        crate::cluster::apply(
            &crate::cluster::Target::of(object).status(),
            &body.to_string(),
        )?;
        Ok(true)
    }
}

/// Now by the wall clock, in RFC 3339 to the second (as `metav1.Time` is written).
fn now() -> String {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(seconds)
}

/// `seconds` after the Unix epoch as `YYYY-MM-DDThh:mm:ssZ`.
fn rfc3339(seconds: u64) -> String {
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's days_from_civil, inverted).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Case {
        about: String,
        status: Value,
        #[serde(default)]
        conditions: Vec<Condition>,
        #[serde(default)]
        fields: Map<String, Value>,
        now: String,
        apply: Value,
    }

    #[test]
    fn the_shared_status_cases_hold() {
        let cases: Vec<Case> =
            serde_json::from_str(include_str!("../status-cases.json")).expect("status-cases.json");
        assert!(cases.len() >= 8);
        for case in cases {
            let mut status = Status::new();
            for c in case.conditions {
                status = status.condition(c);
            }
            for (name, value) in case.fields {
                status = status.field(&name, value);
            }
            let got = status.changes(&case.status, &case.now);
            assert_eq!(got.unwrap_or(Value::Null), case.apply, "{}", case.about);
        }
    }

    #[test]
    fn times_are_written_as_kubernetes_writes_them() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_538_896), "2026-12-06T06:34:56Z");
        assert_eq!(now().len(), 20);
    }

    #[test]
    fn a_condition_set_twice_is_kept_once() {
        let status = Status::new()
            .condition(Condition::new("Ready", false, "Waiting", "no pods"))
            .condition(Condition::new("Ready", true, "Running", "3 pods"));
        let body = status.changes(&Value::Null, "t").expect("a change");
        assert_eq!(body["conditions"].as_array().map(Vec::len), Some(1));
        assert_eq!(body["conditions"][0]["status"], "True");
    }
}
