//! What a step produced against what it expects: log lines and writes matched in any order,
//! the differences written as a readable diff (`-` expected and missing, `+` unexpected).

use serde_json::Value;

use crate::testing::spec::{ExpectedWrite, LogLine};
use crate::wasm::logging::{Level, PluginLogRecord};
use crate::write::{Action, Write};

/// `level` as test files write it.
pub fn level_name(level: Level) -> &'static str {
    match level {
        Level::Trace => "trace",
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    }
}

/// A log line as reports show it: `info "message" key="value" ...`.
fn show_log<'a>(
    level: &str,
    message: &str,
    fields: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> String {
    let mut out = format!("{level} {message:?}");
    for (k, v) in fields {
        out.push_str(&format!(" {k}={v:?}"));
    }
    out
}

/// One logged line as reports show it.
pub fn show_line(line: &PluginLogRecord) -> String {
    let fields = line.fields.iter().map(|(k, v)| (k, v));
    show_log(level_name(line.level), &line.message, fields)
}

fn show_expected_line(line: &LogLine) -> String {
    let level = line.level.as_deref().unwrap_or("any");
    show_log(level, &line.message, &line.fields)
}

fn line_matches(want: &LogLine, got: &PluginLogRecord) -> bool {
    want.message == got.message
        && want
            .level
            .as_deref()
            .is_none_or(|l| l == level_name(got.level))
        && want
            .fields
            .iter()
            .all(|(k, v)| got.field(k) == Some(v.as_str()))
}

/// A write as test files name it: its action, its target and what it carries.
#[derive(Debug, Clone, PartialEq)]
pub struct SentWrite {
    /// `apply`, `merge-patch`, `json-patch`, `create`, `delete` or `record-event`.
    pub action: &'static str,
    /// `apiVersion/Kind namespace/name`; for an Event, the object it is about.
    pub target: String,
    /// The JSON body, when the action has one.
    pub body: Option<Value>,
    /// An Event's reason.
    pub reason: Option<String>,
    /// An Event's type, `Normal` or `Warning`.
    pub event_type: Option<&'static str>,
}

impl SentWrite {
    /// How test files name `write`.
    pub fn of(write: &Write) -> Self {
        let body = |text: &str| Some(serde_json::from_str(text).unwrap_or(Value::Null));
        let plain = |action, body| Self {
            action,
            target: write.target.to_string(),
            body,
            reason: None,
            event_type: None,
        };
        match &write.action {
            Action::Apply(b) => plain("apply", body(b)),
            Action::MergePatch(b) => plain("merge-patch", body(b)),
            Action::JsonPatch(b) => plain("json-patch", body(b)),
            Action::Create(b) => plain("create", body(b)),
            Action::Delete(_) => plain("delete", None),
            Action::RecordEvent {
                regarding,
                warning,
                reason,
                note,
            } => Self {
                action: "record-event",
                target: format!(
                    "{} {}",
                    regarding.gvk,
                    crate::object::object_key(regarding.namespace.as_deref(), &regarding.name)
                ),
                body: Some(Value::String(note.clone())),
                reason: Some(reason.clone()),
                event_type: Some(if *warning { "Warning" } else { "Normal" }),
            },
        }
    }

    /// As reports show it: `action target type=.. reason=.. body=..`.
    pub fn show(&self) -> String {
        let body = self.body.as_ref().map(|b| ("=", b));
        show_write(
            self.action,
            &self.target,
            self.event_type,
            self.reason.as_deref(),
            body,
        )
    }
}

fn show_expected_write(w: &ExpectedWrite) -> String {
    let body = w.body.as_ref().map(|b| ("⊇", b));
    let (event_type, reason) = (w.event_type.as_deref(), w.reason.as_deref());
    show_write(&w.action, &w.target, event_type, reason, body)
}

/// A write as reports show it: `action target type=.. reason=.. body=..`, where an expected
/// body shows as `body⊇..` (it only has to be contained).
fn show_write(
    action: &str,
    target: &str,
    event_type: Option<&str>,
    reason: Option<&str>,
    body: Option<(&str, &Value)>,
) -> String {
    let mut out = format!("{action} {target}");
    if let Some(t) = event_type {
        out.push_str(&format!(" type={t}"));
    }
    if let Some(r) = reason {
        out.push_str(&format!(" reason={r}"));
    }
    if let Some((op, b)) = body {
        out.push_str(&format!(" body{op}{b}"));
    }
    out
}

/// What is wrong with the object `wanted` names in `folder`: missing, or not holding every
/// field `wanted` gives (as [`contains`] compares); empty when it matches.
pub fn object(wanted: &Value, folder: &crate::source::manifests::ManifestFolder) -> Vec<String> {
    let Ok(r) = super::spec::Reference::of(wanted) else {
        return vec![format!("objects: {wanted} names no object")];
    };
    match folder.object(&r.gvk(), r.namespace.as_deref(), &r.name) {
        None => vec![format!("{}: not in the cluster", r.display())],
        Some(got) if contains(&got, wanted) => Vec::new(),
        Some(got) => vec![format!(
            "{}: expected to hold {wanted}, is {}",
            r.display(),
            crate::text::cut(got.to_string(), 2000)
        )],
    }
}

/// True when `got` holds everything in `want`: an object's keys recursively, a list item by
/// item, any other value equal.
pub fn contains(got: &Value, want: &Value) -> bool {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| g.get(k).is_some_and(|gv| contains(gv, wv))),
        (Value::Array(g), Value::Array(w)) => {
            g.len() == w.len() && g.iter().zip(w).all(|(g, w)| contains(g, w))
        }
        _ => got == want,
    }
}

fn write_matches(want: &ExpectedWrite, got: &SentWrite) -> bool {
    want.action == got.action
        && want.target == got.target
        && want
            .reason
            .as_ref()
            .is_none_or(|r| got.reason.as_ref() == Some(r))
        && want
            .event_type
            .as_deref()
            .is_none_or(|t| got.event_type == Some(t))
        && want
            .body
            .as_ref()
            .is_none_or(|b| got.body.as_ref().is_some_and(|g| contains(g, b)))
}

/// The diff of `wanted` against `got`, each item used once, in any order: `- ` lines for
/// what was expected and missing, `+ ` lines for what came unexpected. Empty when they match.
fn diff<W, G>(
    wanted: &[W],
    got: &[G],
    matches: impl Fn(&W, &G) -> bool,
    show_wanted: impl Fn(&W) -> String,
    show_got: impl Fn(&G) -> String,
) -> Vec<String> {
    let mut used = vec![false; got.len()];
    let mut out = Vec::new();
    for w in wanted {
        match (0..got.len()).find(|&i| !used[i] && matches(w, &got[i])) {
            Some(i) => used[i] = true,
            None => out.push(format!("- {}", show_wanted(w))),
        }
    }
    out.extend(
        got.iter()
            .zip(&used)
            .filter(|(_, used)| !**used)
            .map(|(g, _)| format!("+ {}", show_got(g))),
    );
    out
}

/// The diff of expected against logged lines.
pub fn logs(wanted: &[LogLine], got: &[PluginLogRecord]) -> Vec<String> {
    diff(wanted, got, line_matches, show_expected_line, show_line)
}

/// The diff of expected against sent writes.
pub fn writes(wanted: &[ExpectedWrite], got: &[SentWrite]) -> Vec<String> {
    diff(
        wanted,
        got,
        write_matches,
        show_expected_write,
        SentWrite::show,
    )
}

/// Where an admission answer differs from what the step expects, one line each.
pub fn answer(
    wanted: &super::spec::ExpectedAnswer,
    got: &crate::admission::review::Answer,
) -> Vec<String> {
    let mut problems = Vec::new();
    if wanted.allowed != got.allowed {
        problems.push(format!(
            "admission: {}, expected {} (message: {:?})",
            if got.allowed { "allowed" } else { "denied" },
            if wanted.allowed { "allowed" } else { "denied" },
            got.message
        ));
    }
    if let Some(part) = &wanted.message
        && !got.message.contains(part.as_str())
    {
        problems.push(format!(
            "admission message: {:?} does not contain {part:?}",
            got.message
        ));
    }
    if let Some(patch) = &wanted.patch {
        let got_patch = got.patch.clone().unwrap_or(Value::Array(Vec::new()));
        if *patch != got_patch {
            problems.push(format!("admission patch: {got_patch}, expected {patch}"));
        }
    }
    if let Some(warnings) = &wanted.warnings
        && *warnings != got.warnings
    {
        problems.push(format!(
            "admission warnings: {:?}, expected {warnings:?}",
            got.warnings
        ));
    }
    problems
}

/// Where the state differs from the keys a step names (`None`: the key must be absent), one
/// line each.
pub fn state_keys(
    wanted: &std::collections::BTreeMap<String, Option<String>>,
    got: &std::collections::BTreeMap<String, String>,
) -> Vec<String> {
    wanted
        .iter()
        .filter(|(key, value)| got.get(*key) != value.as_ref())
        .map(|(key, value)| match (value, got.get(key)) {
            (Some(want), Some(have)) => format!("state {key:?}: {have:?}, expected {want:?}"),
            (Some(want), None) => format!("state {key:?}: absent, expected {want:?}"),
            (None, have) => format!(
                "state {key:?}: {:?}, expected absent",
                have.map(String::as_str).unwrap_or_default()
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn named_state_keys_are_checked_and_others_ignored() {
        let got: std::collections::BTreeMap<String, String> = [
            ("count".to_owned(), "3".to_owned()),
            ("at".to_owned(), "2030-01-01T00:00:07Z".to_owned()),
        ]
        .into();
        let want = |pairs: &[(&str, Option<&str>)]| {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
                .collect()
        };
        assert!(state_keys(&want(&[("count", Some("3")), ("gone", None)]), &got).is_empty());
        assert_eq!(
            state_keys(
                &want(&[("count", Some("4")), ("at", None), ("new", Some("1"))]),
                &got
            ),
            [
                r#"state "at": "2030-01-01T00:00:07Z", expected absent"#,
                r#"state "count": "3", expected "4""#,
                r#"state "new": absent, expected "1""#,
            ]
        );
    }

    fn record(message: &str, fields: &[(&str, &str)]) -> PluginLogRecord {
        PluginLogRecord {
            plugin: "p".into(),
            digest: String::new(),
            key: None,
            level: Level::Info,
            message: message.into(),
            fields: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    fn want(message: &str, level: Option<&str>, fields: &[(&str, &str)]) -> LogLine {
        LogLine {
            message: message.into(),
            level: level.map(str::to_owned),
            fields: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    #[test]
    fn lines_match_in_any_order_on_message_level_and_named_fields() {
        let got = [
            record("b", &[("pod", "x"), ("n", "1")]),
            record("a", &[("pod", "y")]),
        ];
        let wanted = [
            want("a", Some("info"), &[("pod", "y")]),
            want("b", None, &[("pod", "x")]),
        ];
        assert!(logs(&wanted, &got).is_empty());
        let wrong = [
            want("b", Some("warn"), &[]),
            want("a", None, &[("pod", "z")]),
        ];
        assert_eq!(
            logs(&wrong, &got),
            [
                "- warn \"b\"",
                "- any \"a\" pod=\"z\"",
                "+ info \"b\" pod=\"x\" n=\"1\"",
                "+ info \"a\" pod=\"y\"",
            ]
        );
        // Each line counts once.
        let twice = [want("a", None, &[]), want("a", None, &[])];
        assert_eq!(logs(&twice, &got[1..]), ["- any \"a\""]);
    }

    #[test]
    fn bodies_match_as_subsets_and_lists_item_by_item() {
        let got = json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}}, "l": [1, {"k": 1, "j": 2}]});
        assert!(contains(&got, &json!({"metadata": {"labels": {"x": "1"}}})));
        assert!(contains(&got, &json!({"l": [1, {"k": 1}]})));
        assert!(!contains(&got, &json!({"l": [1]})));
        assert!(!contains(
            &got,
            &json!({"metadata": {"labels": {"x": "2"}}})
        ));
        assert!(!contains(&got, &json!({"missing": null})));
    }
}
