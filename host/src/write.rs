//! Writes to the cluster: what the operator grants a plugin, what a plugin staged during one
//! `handle` call, and the [`Writer`] each cluster (API server, manifests folder) sends them
//! through once the call returned Ok.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

use crate::gvk::Gvk;

/// An RBAC verb a write needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verb {
    /// `create`: create, and server-side apply of an object that does not exist yet.
    Create,
    /// `patch`: server-side apply, merge and JSON patches, repeats of a recorded Event.
    Patch,
    /// `delete`.
    Delete,
}

impl Verb {
    /// Every verb a write grant may name.
    pub const ALL: [Verb; 3] = [Verb::Create, Verb::Patch, Verb::Delete];

    /// The verb as RBAC spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
        }
    }

    /// Parses an RBAC verb that a write grant may name.
    pub fn parse(text: &str) -> Result<Self, UnknownVerb> {
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == text)
            .ok_or_else(|| UnknownVerb(text.chars().take(40).collect()))
    }
}

/// A verb a write grant cannot name (its first 40 characters).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown verb {0:?}: a write grant names create, patch or delete")]
pub struct UnknownVerb(pub String);

impl fmt::Display for Verb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The kinds of write, as the contract names them.
pub const WRITE_VERBS: [&str; 6] = [
    "apply",
    "merge-patch",
    "json-patch",
    "create",
    "delete",
    "record-event",
];

/// The type of an Event (events.k8s.io/v1).
pub fn event_gvk() -> Gvk {
    Gvk::new("events.k8s.io", "v1", "Event")
}

/// Subresources a plugin may write to.
pub const SUBRESOURCES: [&str; 2] = ["status", "scale"];

/// One rule of `grants.writes`: these verbs on these types (and subresources), in these
/// namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteGrant {
    /// Resource types.
    pub resources: Vec<Gvk>,
    /// Subresources (`status`, `scale`) of those types also covered; the objects themselves
    /// always are.
    pub subresources: Vec<String>,
    /// Verbs.
    pub verbs: Vec<Verb>,
    /// Namespaces; `None`: every namespace, and cluster-scoped objects.
    pub namespaces: Option<Vec<String>>,
}

impl fmt::Display for WriteGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let join = |items: Vec<String>| items.join(", ");
        write!(
            f,
            "{} on {}",
            join(self.verbs.iter().map(|v| v.to_string()).collect()),
            join(self.resources.iter().map(Gvk::to_string).collect())
        )?;
        if !self.subresources.is_empty() {
            write!(f, " (and {})", self.subresources.join(", "))?;
        }
        match &self.namespaces {
            Some(list) => write!(f, " in namespaces {}", list.join(", ")),
            None => f.write_str(" in every namespace"),
        }
    }
}

impl WriteGrant {
    fn covers(&self, gvk: &Gvk, subresource: Option<&str>, namespace: Option<&str>) -> bool {
        self.resources.contains(gvk)
            && subresource.is_none_or(|s| self.subresources.iter().any(|g| g == s))
            && match (&self.namespaces, namespace) {
                (None, _) => true,
                (Some(list), Some(ns)) => list.iter().any(|g| g == ns),
                (Some(_), None) => false,
            }
    }
}

/// Whether `grants` allow `verb` on `gvk` (its `subresource`) in `namespace`; the refusal
/// names what is missing.
pub fn allowed(
    grants: &[WriteGrant],
    verb: Verb,
    gvk: &Gvk,
    subresource: Option<&str>,
    namespace: Option<&str>,
) -> Result<(), String> {
    if grants
        .iter()
        .any(|g| g.verbs.contains(&verb) && g.covers(gvk, subresource, namespace))
    {
        return Ok(());
    }
    let what = match subresource {
        Some(s) => format!("{gvk} ({s})"),
        None => gvk.to_string(),
    };
    let place = match namespace {
        Some(ns) => format!("in namespace {ns}"),
        None => "(cluster-scoped)".to_owned(),
    };
    Err(format!(
        "{verb} on {what} {place} is not granted: add it to this plugin's grants.writes"
    ))
}

/// What a write is aimed at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The resource type.
    pub gvk: Gvk,
    /// The namespace; none for cluster-scoped objects.
    pub namespace: Option<String>,
    /// The object's name.
    pub name: String,
    /// A subresource (`status`, `scale`); none for the object itself.
    pub subresource: Option<String>,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.gvk)?;
        if let Some(ns) = &self.namespace {
            write!(f, "{ns}/")?;
        }
        f.write_str(&self.name)?;
        if let Some(s) = &self.subresource {
            write!(f, " ({s})")?;
        }
        Ok(())
    }
}

/// The object an Event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regarding {
    /// Its type.
    pub gvk: Gvk,
    /// Its namespace.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// Its resource version when the event was recorded.
    pub resource_version: String,
}

/// What a staged write does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Server-side apply of this JSON object (with apiVersion, kind and name filled in).
    Apply(String),
    /// A JSON merge patch (RFC 7386).
    MergePatch(String),
    /// A JSON patch (RFC 6902).
    JsonPatch(String),
    /// Creates this JSON object.
    Create(String),
    /// Deletes, with a propagation policy and preconditions.
    Delete(DeleteOptions),
    /// Records an Event about an object.
    RecordEvent {
        /// The object it is about.
        regarding: Regarding,
        /// `Warning` rather than `Normal`.
        warning: bool,
        /// Why, in UpperCamelCase.
        reason: String,
        /// What happened, for humans.
        note: String,
    },
}

/// What happens to the dependents of a deleted object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// The object goes at once, its dependents after it (kubectl's default).
    #[default]
    Background,
    /// The object waits, with a deletion timestamp, until its blocking dependents are gone.
    Foreground,
    /// The dependents stay, their ownerReference to it removed.
    Orphan,
}

impl Propagation {
    /// As the API server's `propagationPolicy` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Propagation::Background => "Background",
            Propagation::Foreground => "Foreground",
            Propagation::Orphan => "Orphan",
        }
    }
}

/// How to delete: the propagation policy and preconditions.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteOptions {
    /// What happens to the dependents.
    pub propagation: Propagation,
    /// Only if the object's uid is still this.
    pub uid: Option<String>,
    /// Only if the object's resourceVersion is still this.
    pub resource_version: Option<String>,
}

/// One write a plugin staged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// What it is aimed at (for an Event: the Event's namespace, its regarding object's name).
    pub target: Target,
    /// What it does.
    pub action: Action,
}

impl Write {
    /// The name the contract gives the write's kind (`apply`, `merge-patch`, ...).
    pub fn verb(&self) -> &'static str {
        WRITE_VERBS[self.verb_index()]
    }

    /// Its kind's index in [`WRITE_VERBS`].
    pub fn verb_index(&self) -> usize {
        match self.action {
            Action::Apply(_) => 0,
            Action::MergePatch(_) => 1,
            Action::JsonPatch(_) => 2,
            Action::Create(_) => 3,
            Action::Delete(_) => 4,
            Action::RecordEvent { .. } => 5,
        }
    }

    /// Bytes of plugin-provided text it carries.
    pub fn size(&self) -> usize {
        let t = &self.target;
        let text = match &self.action {
            Action::Apply(s) | Action::MergePatch(s) | Action::JsonPatch(s) | Action::Create(s) => {
                s.len()
            }
            Action::Delete(o) => {
                o.uid.as_ref().map_or(0, String::len)
                    + o.resource_version.as_ref().map_or(0, String::len)
            }
            Action::RecordEvent { reason, note, .. } => reason.len() + note.len(),
        };
        text + t.name.len() + t.namespace.as_ref().map_or(0, String::len)
    }
}

/// Whether `action` would leave `current` (the object as cached) as it is: an apply or merge
/// patch whose every field already has its value, a JSON patch that changes nothing. Such a
/// write is not sent. Creates, deletes and Events always change something.
pub fn changes_nothing(current: &serde_json::Value, action: &Action) -> bool {
    let mut after = current.clone();
    match action {
        Action::Apply(body) | Action::MergePatch(body) => {
            let Ok(patch) = serde_json::from_str::<serde_json::Value>(body) else {
                return false;
            };
            json_patch::merge(&mut after, &patch);
        }
        Action::JsonPatch(body) => {
            let Ok(ops) = serde_json::from_str::<json_patch::Patch>(body) else {
                return false;
            };
            if json_patch::patch(&mut after, &ops).is_err() {
                return false;
            }
        }
        Action::Create(_) | Action::Delete(_) | Action::RecordEvent { .. } => return false,
    }
    after == *current
}

/// Why the cluster refused a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The API server's reason (`Conflict`, `Forbidden`, `Invalid`, `NotFound`, ...).
    pub reason: String,
    /// Its message.
    pub message: String,
    /// Whether sending it again later may succeed (conflicts, throttling, unavailability).
    pub retry: bool,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}

/// A cluster that takes writes. Blocking: called from a plugin's dispatch thread.
pub trait Writer: Send + Sync {
    /// Sends one write of plugin `plugin` (its field manager is `kubewasm/<plugin>`).
    fn send(&self, plugin: &str, write: &Write) -> Result<(), Refusal>;

    /// As [`Self::send`], abandoned (a retryable refusal that says so) when not answered
    /// within `within`: the time the replica's Lease is confirmed for, past which another
    /// replica may lead. A writer that answers at once ignores it.
    fn send_within(
        &self,
        plugin: &str,
        write: &Write,
        within: std::time::Duration,
    ) -> Result<(), Refusal> {
        let _ = within;
        self.send(plugin, write)
    }

    /// Sends `write` as a dry run (`dryRun=All`): checked and admitted as it would be, kept
    /// nowhere. The object the cluster answered with, when it answers with one; within
    /// `within`, as [`Self::send_within`].
    fn dry_run(
        &self,
        plugin: &str,
        write: &Write,
        within: Duration,
    ) -> Result<Option<serde_json::Value>, Refusal> {
        let _ = (plugin, write, within);
        Err(Refusal {
            reason: "NotSupported".into(),
            message: "this cluster cannot dry-run writes".into(),
            retry: false,
        })
    }
}

/// The field manager of a plugin's writes.
pub fn field_manager(plugin: &str) -> String {
    format!("kubewasm/{plugin}")
}

/// `reportingController` of the Events plugins record.
pub const REPORTING_CONTROLLER: &str = "kubewasm";
/// `action` of the Events plugins record: what kubewasm was doing.
pub const EVENT_ACTION: &str = "Handle";

/// A time as Events write it (RFC 3339 with microseconds).
pub fn micro_time(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The Event (events.k8s.io/v1) plugin `plugin` records with `write`, named `name` in
/// `namespace` at `time`; `None` when `write` records no Event.
pub fn event_object(
    plugin: &str,
    write: &Write,
    name: &str,
    namespace: &str,
    time: jiff::Timestamp,
) -> Option<serde_json::Value> {
    let Action::RecordEvent {
        regarding,
        warning,
        reason,
        note,
    } = &write.action
    else {
        return None;
    };
    let mut regarding_ref = serde_json::json!({
        "apiVersion": regarding.gvk.api_version(),
        "kind": regarding.gvk.kind,
        "name": regarding.name,
    });
    for (field, value) in [
        ("namespace", regarding.namespace.as_deref().unwrap_or("")),
        ("uid", &regarding.uid),
        ("resourceVersion", &regarding.resource_version),
    ] {
        if !value.is_empty() {
            regarding_ref[field] = value.into();
        }
    }
    Some(serde_json::json!({
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "eventTime": micro_time(time),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": plugin,
        "action": EVENT_ACTION,
        "reason": reason,
        "note": note,
        "type": if *warning { "Warning" } else { "Normal" },
        "regarding": regarding_ref,
    }))
}

/// How long repeats of one Event are folded into its series (client-go's recorder: 6 min).
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// Most Event series remembered at once; past it, expired ones are forgotten and, if none
/// expired, a repeat starts an Event of its own.
pub const MAX_SERIES: usize = 4096;

/// Whether an Event is new or a repeat of one recorded within [`SERIES_WINDOW`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Occurrence {
    /// Create an Event of this name.
    New(String),
    /// Patch the series of the Event of this name to this count.
    Repeat(String, u32),
}

struct Series {
    name: String,
    count: u32,
    last: Instant,
}

/// Repeats of an Event (same plugin, object, type, reason and note), aggregated like
/// client-go's events recorder: the first is created, later ones within the window raise
/// the first one's `series.count`.
#[derive(Default)]
pub struct EventSeries {
    series: HashMap<(String, String, bool, String, String), Series>,
}

impl EventSeries {
    /// Records one occurrence at `now`; `name` is the name a new Event would get.
    pub fn observe(
        &mut self,
        plugin: &str,
        write: &Write,
        name: String,
        now: Instant,
    ) -> Occurrence {
        let Action::RecordEvent {
            regarding,
            warning,
            reason,
            note,
        } = &write.action
        else {
            return Occurrence::New(name);
        };
        let key = (
            plugin.to_owned(),
            regarding.uid.clone(),
            *warning,
            reason.clone(),
            note.clone(),
        );
        if let Some(s) = self.series.get_mut(&key)
            && now.duration_since(s.last) < SERIES_WINDOW
        {
            s.count = s.count.saturating_add(1);
            s.last = now;
            return Occurrence::Repeat(s.name.clone(), s.count);
        }
        if self.series.len() >= MAX_SERIES {
            self.series
                .retain(|_, s| now.duration_since(s.last) < SERIES_WINDOW);
        }
        if self.series.len() < MAX_SERIES {
            self.series.insert(
                key,
                Series {
                    name: name.clone(),
                    count: 1,
                    last: now,
                },
            );
        }
        Occurrence::New(name)
    }

    /// Forgets an Event whose creation failed, so its next occurrence creates it again.
    pub fn forget(&mut self, name: &str) {
        self.series.retain(|_, s| s.name != name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_that_changes_nothing_is_told_apart() {
        let current = serde_json::json!({"metadata": {"name": "a", "labels": {"x": "1"}},
            "spec": {"n": 1}});
        let apply = |b: &str| Action::Apply(b.to_owned());
        let merge = |b: &str| Action::MergePatch(b.to_owned());
        let json = |b: &str| Action::JsonPatch(b.to_owned());
        assert!(changes_nothing(
            &current,
            &apply(r#"{"metadata":{"labels":{"x":"1"}}}"#)
        ));
        assert!(!changes_nothing(
            &current,
            &apply(r#"{"metadata":{"labels":{"x":"2"}}}"#)
        ));
        assert!(changes_nothing(&current, &merge(r#"{"spec":{"n":1}}"#)));
        assert!(!changes_nothing(&current, &merge(r#"{"spec":{"n":null}}"#)));
        assert!(changes_nothing(
            &current,
            &json(r#"[{"op":"replace","path":"/spec/n","value":1}]"#)
        ));
        assert!(!changes_nothing(
            &current,
            &json(r#"[{"op":"add","path":"/spec/m","value":1}]"#)
        ));
        assert!(!changes_nothing(
            &current,
            &json(r#"[{"op":"remove","path":"/nowhere"}]"#)
        ));
        assert!(!changes_nothing(&current, &Action::Create("{}".into())));
        assert!(!changes_nothing(
            &current,
            &Action::Delete(DeleteOptions::default())
        ));
    }

    fn grant(namespaces: Option<&[&str]>) -> WriteGrant {
        WriteGrant {
            resources: vec![Gvk::new("", "v1", "Pod")],
            subresources: vec!["status".into()],
            verbs: vec![Verb::Patch],
            namespaces: namespaces.map(|n| n.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    #[test]
    fn a_grant_covers_its_verbs_types_subresources_and_namespaces_only() {
        let pod = Gvk::new("", "v1", "Pod");
        let g = [grant(Some(&["shop"]))];
        assert!(allowed(&g, Verb::Patch, &pod, None, Some("shop")).is_ok());
        assert!(allowed(&g, Verb::Patch, &pod, Some("status"), Some("shop")).is_ok());
        let other_ns =
            allowed(&g, Verb::Patch, &pod, None, Some("kube-system")).expect_err("refused");
        assert!(other_ns.contains("in namespace kube-system"), "{other_ns}");
        let verb = allowed(&g, Verb::Delete, &pod, None, Some("shop")).expect_err("refused");
        assert!(verb.starts_with("delete on v1/Pod"), "{verb}");
        assert!(allowed(&g, Verb::Patch, &pod, Some("scale"), Some("shop")).is_err());
        let cm = Gvk::new("", "v1", "ConfigMap");
        assert!(allowed(&g, Verb::Patch, &cm, None, Some("shop")).is_err());
        assert!(
            allowed(&g, Verb::Patch, &pod, None, None).is_err(),
            "a namespaced grant does not reach cluster-scoped objects"
        );
        assert!(allowed(&[grant(None)], Verb::Patch, &pod, None, None).is_ok());
        let refused = Verb::parse("update").expect_err("refused");
        assert_eq!(refused, UnknownVerb("update".into()));
        assert!(refused.to_string().contains("create, patch or delete"));
    }

    fn event(note: &str) -> Write {
        Write {
            target: Target {
                gvk: event_gvk(),
                namespace: Some("shop".into()),
                name: "web".into(),
                subresource: None,
            },
            action: Action::RecordEvent {
                regarding: Regarding {
                    gvk: Gvk::new("", "v1", "Pod"),
                    namespace: Some("shop".into()),
                    name: "web".into(),
                    uid: "u1".into(),
                    resource_version: "7".into(),
                },
                warning: true,
                reason: "CrashLoop".into(),
                note: note.into(),
            },
        }
    }

    #[test]
    fn repeats_within_the_window_raise_the_first_events_count() {
        let mut s = EventSeries::default();
        let t0 = Instant::now();
        let a = event("restarting");
        assert_eq!(
            s.observe("p", &a, "e1".into(), t0),
            Occurrence::New("e1".into())
        );
        assert_eq!(
            s.observe("p", &a, "e2".into(), t0 + Duration::from_secs(60)),
            Occurrence::Repeat("e1".into(), 2)
        );
        assert_eq!(
            s.observe("p", &event("other"), "e3".into(), t0),
            Occurrence::New("e3".into()),
            "another note is another Event"
        );
        assert_eq!(
            s.observe("q", &a, "e4".into(), t0),
            Occurrence::New("e4".into()),
            "another plugin is another reporting instance"
        );
        assert_eq!(
            s.observe(
                "p",
                &a,
                "e5".into(),
                t0 + Duration::from_secs(60) + SERIES_WINDOW
            ),
            Occurrence::New("e5".into()),
            "past the window a new Event starts"
        );
        s.forget("e5");
        assert_eq!(
            s.observe(
                "p",
                &a,
                "e6".into(),
                t0 + Duration::from_secs(61) + SERIES_WINDOW
            ),
            Occurrence::New("e6".into())
        );
    }
}
