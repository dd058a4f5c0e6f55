//! A plugin's manifest, validated: what it subscribes to, queries and indexes, the controller
//! it is and the metrics it publishes.

mod controller;
mod metrics;

use std::collections::HashSet;
use std::time::Duration;

use kubewasm_sdk::selector::Selector;

use crate::gvk::Gvk;
use crate::informer::Filter;
use crate::informer::index::{IndexFunc, is_builtin};
use crate::object::Keep;
use crate::source::Scope;
use crate::text;
use crate::wasm::bindings::kubewasm::plugin::types as wit;
use crate::wasm::{convert, limits};

/// Most subscriptions in one manifest (identical ones are folded first).
pub const MAX_SUBSCRIPTIONS: usize = 32;
/// Most subscriptions a manifest may list before folding.
pub const MAX_LISTED_SUBSCRIPTIONS: usize = 4096;
/// Most distinct resource types one plugin may subscribe to or query.
pub const MAX_TYPES: usize = 32;
/// Most namespaces one subscription may name.
pub const MAX_NAMESPACES: usize = 64;
/// Most indexes one plugin may declare.
pub const MAX_INDEXES: usize = 16;
/// Longest index name, JSON pointer, namespace or part of a type name.
pub const MAX_NAME_BYTES: usize = 253;
/// Most change-filter pointers one subscription may name.
pub const MAX_CHANGES: usize = 16;
/// Most change-filter pointers one plugin may name in all: each is compared on every update
/// of its type, by the host, for the plugin.
pub const MAX_PLUGIN_CHANGES: usize = 64;
/// Most reference tokens in one change-filter pointer.
pub const MAX_CHANGE_DEPTH: usize = 16;
/// Most field pointers one subscription may declare it reads.
pub const MAX_FIELDS: usize = 32;
/// Most schedules one plugin may declare.
pub const MAX_SCHEDULES: usize = 16;
/// Most admission rules, and match conditions, one plugin may declare.
pub const MAX_ADMISSION_RULES: usize = 32;
/// Longest CEL match condition.
pub const MAX_CONDITION_BYTES: usize = 4096;
/// Longest jitter a schedule may ask for.
pub const MAX_JITTER_SECONDS: u32 = 3600;

/// A manifest field that is not acceptable, and why.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("manifest field `{field}`: {reason}")]
pub struct ManifestError {
    /// Path of the field, for example `subscriptions[0].label-selector`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

/// A field index a plugin declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredIndex {
    /// The indexed resource type.
    pub gvk: Gvk,
    /// The index name.
    pub name: String,
    /// How values are computed.
    pub func: IndexFunc,
}

impl PluginManifest {
    /// The objects of `gvk` the plugin sees.
    pub fn scope(&self, gvk: &Gvk) -> Scope {
        self.scopes.get(gvk).cloned().unwrap_or_default()
    }

    /// Adds the types it reads to `reads`, each in the namespaces it reads it in.
    pub fn add_reads(&self, reads: &mut crate::rbac::Reads) {
        for gvk in &self.cached {
            reads.add(gvk, self.scope(gvk).namespaces());
        }
    }
}

/// A validated plugin manifest.
#[derive(Debug, Clone)]
pub struct PluginManifest {
    /// Subscribed resource types with their filters.
    pub subscriptions: Vec<(Gvk, Filter)>,
    /// Every resource type the plugin needs cached: subscribed and queried, deduplicated.
    pub cached: Vec<Gvk>,
    /// Per cached type, the objects the plugin sees (in events and queries): the union of its
    /// subscriptions' namespaces and selectors, everything for a type it declares in
    /// `queries`.
    pub scopes: std::collections::BTreeMap<Gvk, Scope>,
    /// Declared field indexes.
    pub indexes: Vec<DeclaredIndex>,
    /// Resync period, if any.
    pub resync: Option<Duration>,
    /// Named schedules, parsed.
    pub schedules: Vec<Schedule>,
    /// Whether the plugin uses `state`.
    pub state: bool,
    /// The admission webhook it serves.
    pub admission: Option<Admission>,
    /// The controller it is, if any (0.5).
    pub controller: Option<crate::controller::Spec>,
    /// The metrics it publishes (0.5).
    pub metrics: Vec<crate::plugin_metrics::Declared>,
}

/// A declared schedule.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Its name (what `tick` is called with).
    pub name: String,
    /// When.
    pub cron: crate::schedule::Cron,
    /// The cron text as declared.
    pub text: String,
    /// The time zone as declared (`None`: UTC).
    pub time_zone: Option<String>,
    /// Up to this much random delay per tick.
    pub jitter: Duration,
}

/// Equal when declared alike (the parsed `cron` follows from the text and the zone).
impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        (&self.name, &self.text, &self.time_zone, self.jitter)
            == (&other.name, &other.text, &other.time_zone, other.jitter)
    }
}

impl Eq for Schedule {}

pub use crate::wasm::admit::Operation;

/// One admission rule: a type, its operations and subresources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionRule {
    /// The type reviewed.
    pub gvk: Gvk,
    /// The operations reviewed.
    pub operations: Vec<Operation>,
    /// Subresources reviewed too.
    pub subresources: Vec<String>,
}

/// The admission webhook a plugin serves, as it declared it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// Mutating (may patch) rather than validating.
    pub mutating: bool,
    /// What it reviews.
    pub rules: Vec<AdmissionRule>,
    /// Let requests through when it cannot answer (`Ignore`), rather than refuse them.
    pub fail_open: bool,
    /// The API server's timeout for the call.
    pub timeout: Duration,
    /// Only namespaces whose labels match this selector.
    pub namespace_selector: Option<String>,
    /// CEL match conditions, by name.
    pub match_conditions: Vec<(String, String)>,
}

/// The reason may echo what the plugin sent (a selector that does not parse): made safe to
/// print and cut.
fn error(field: String, reason: impl Into<String>) -> ManifestError {
    ManifestError {
        field,
        reason: text::cut(reason.into(), text::MAX_MESSAGE_BYTES),
    }
}

/// Names and types are printed in log lines and status as they are: none may hold what would
/// have to be escaped there.
fn check_printable(field: &str, text: &str) -> Result<(), ManifestError> {
    if text::printable_as_is(text) {
        return Ok(());
    }
    Err(error(
        field.to_owned(),
        "holds a control character, a line separator or a bidirectional override",
    ))
}

fn check_gvk(field: String, g: &wit::Gvk) -> Result<Gvk, ManifestError> {
    if g.version.is_empty() || g.kind.is_empty() {
        return Err(error(field, "version and kind must not be empty"));
    }
    if [&g.group, &g.version, &g.kind]
        .iter()
        .any(|p| p.len() > MAX_NAME_BYTES)
    {
        return Err(error(
            field,
            format!("a part is longer than {MAX_NAME_BYTES} bytes"),
        ));
    }
    for part in [&g.group, &g.version, &g.kind] {
        check_printable(&field, part)?;
    }
    Ok(convert::gvk(g))
}

fn check_count(field: &str, count: usize, max: usize) -> Result<(), ManifestError> {
    if count > max {
        return Err(error(
            field.to_owned(),
            format!("{count} entries: at most {max}"),
        ));
    }
    Ok(())
}

fn check_name(field: String, text: &str) -> Result<(), ManifestError> {
    if text.len() > MAX_NAME_BYTES {
        return Err(error(
            field,
            format!("{} bytes: at most {MAX_NAME_BYTES}", text.len()),
        ));
    }
    check_printable(&field, text)
}

/// A checked RFC 6901 pointer (not the whole object).
fn check_pointer(field: String, pointer: &str) -> Result<(), ManifestError> {
    check_name(field.clone(), pointer)?;
    if !pointer.starts_with('/') {
        return Err(error(
            field,
            format!("{pointer:?} is not a JSON pointer (it must start with `/`)"),
        ));
    }
    crate::object::pointer::tokens(pointer)
        .map(drop)
        .map_err(|e| error(field, format!("{pointer:?}: {e}")))
}

/// What subscription `i` says it reads of each object.
fn declared_keep(i: usize, s: &wit::Subscription) -> Result<Keep, ManifestError> {
    for (j, pointer) in s.fields.iter().enumerate() {
        check_pointer(format!("subscriptions[{i}].fields[{j}]"), pointer)?;
    }
    match (s.metadata_only, s.fields.is_empty()) {
        (true, false) => Err(error(
            format!("subscriptions[{i}].metadata-only"),
            "set together with `fields`: declare one or the other".to_owned(),
        )),
        (true, true) => Ok(Keep::MetadataOnly),
        (false, true) => Ok(Keep::Whole),
        (false, false) => Ok(Keep::fields(&s.fields)),
    }
}

/// A pointer the host reads for the plugin (a change filter, an index) that its own
/// declaration leaves out: the host would compare or index nothing.
fn undeclared(field: String, pointer: &str, keep: &Keep) -> ManifestError {
    error(
        field,
        format!(
            "{pointer:?} is outside what the subscription declares it reads ({}): add it to `fields`",
            keep.described()
        ),
    )
}

impl PluginManifest {
    /// Validates what a plugin's `describe` returned.
    /// Counts are checked before any entry is looked at; identical subscriptions are folded
    /// into one.
    pub fn validate(m: &wit::Manifest) -> Result<Self, ManifestError> {
        check_count("indexes", m.indexes.len(), MAX_INDEXES)?;
        check_count("queries", m.queries.len(), MAX_TYPES)?;
        check_count(
            "subscriptions",
            m.subscriptions.len(),
            MAX_LISTED_SUBSCRIPTIONS,
        )?;
        // Sizes first, so that folding compares bounded values only.
        for (i, s) in m.subscriptions.iter().enumerate() {
            check_count(
                &format!("subscriptions[{i}].namespaces"),
                s.namespaces.len(),
                MAX_NAMESPACES,
            )?;
            if let Some(text) = &s.label_selector {
                check_count(
                    &format!("subscriptions[{i}].label-selector (bytes)"),
                    text.len(),
                    limits::MAX_SELECTOR_BYTES,
                )?;
            }
        }
        for (i, s) in m.subscriptions.iter().enumerate() {
            check_count(
                &format!("subscriptions[{i}].changes"),
                s.changes.len(),
                MAX_CHANGES,
            )?;
            check_count(
                &format!("subscriptions[{i}].fields"),
                s.fields.len(),
                MAX_FIELDS,
            )?;
        }
        let mut seen = HashSet::new();
        let distinct: Vec<&wit::Subscription> = m
            .subscriptions
            .iter()
            .filter(|s| {
                seen.insert((
                    (&s.gvk.group, &s.gvk.version, &s.gvk.kind),
                    &s.namespaces,
                    &s.label_selector,
                    &s.changes,
                    &s.fields,
                    s.metadata_only,
                ))
            })
            .collect();
        check_count(
            "subscriptions (identical ones folded)",
            distinct.len(),
            MAX_SUBSCRIPTIONS,
        )?;
        check_count(
            "subscriptions[*].changes (all subscriptions together)",
            distinct.iter().map(|s| s.changes.len()).sum(),
            MAX_PLUGIN_CHANGES,
        )?;
        let mut subscriptions = Vec::new();
        let mut cached: Vec<Gvk> = Vec::new();
        let mut scopes = std::collections::BTreeMap::new();
        for (i, s) in distinct.into_iter().enumerate() {
            let gvk = check_gvk(format!("subscriptions[{i}].gvk"), &s.gvk)?;
            for (j, ns) in s.namespaces.iter().enumerate() {
                check_name(format!("subscriptions[{i}].namespaces[{j}]"), ns)?;
            }
            let selector = match &s.label_selector {
                Some(text) => limits::selector(text)
                    .map_err(|e| error(format!("subscriptions[{i}].label-selector"), e))?,
                None => Selector::everything(),
            };
            for (j, pointer) in s.changes.iter().enumerate() {
                let field = format!("subscriptions[{i}].changes[{j}]");
                check_pointer(field.clone(), pointer)?;
                let depth = pointer.matches('/').count();
                if depth > MAX_CHANGE_DEPTH {
                    return Err(error(
                        field,
                        format!("{depth} levels deep: at most {MAX_CHANGE_DEPTH}"),
                    ));
                }
            }
            let keep = declared_keep(i, s)?;
            for (j, pointer) in s.changes.iter().enumerate() {
                if !keep.holds(pointer) {
                    return Err(undeclared(
                        format!("subscriptions[{i}].changes[{j}]"),
                        pointer,
                        &keep,
                    ));
                }
            }
            let changes = if s.changes.is_empty() {
                None
            } else {
                let changes = crate::informer::Changes::new(&s.changes)
                    .map_err(|e| error(format!("subscriptions[{i}].changes"), e.to_string()))?;
                Some(std::sync::Arc::new(changes))
            };
            if !cached.contains(&gvk) {
                cached.push(gvk.clone());
            }
            let scope = Scope::of(&s.namespaces, &selector).keeping(keep);
            scopes
                .entry(gvk.clone())
                .and_modify(|all: &mut Scope| *all = all.union(&scope))
                .or_insert(scope);
            subscriptions.push((
                gvk,
                Filter {
                    namespaces: s.namespaces.clone(),
                    selector,
                    keys: None,
                    changes,
                    also: Vec::new(),
                },
            ));
        }
        // A controller's types are subscribed to whole, for the controller: their events wake
        // keys (a plugin-declared subscription to one of them would be a second stream).
        if let Some(c) = &m.controller {
            let types = std::iter::once(&c.reconciles)
                .chain(&c.owns)
                .chain(c.watches.iter().map(|w| &w.gvk));
            for g in types {
                let gvk = check_gvk("controller".into(), g)?;
                if subscriptions.iter().any(|(s, _)| *s == gvk) {
                    return Err(error(
                        "subscriptions".into(),
                        format!(
                            "{gvk} is also the controller's: its events wake keys; drop the subscription"
                        ),
                    ));
                }
                if cached.contains(&gvk) {
                    continue;
                }
                cached.push(gvk.clone());
                scopes.insert(gvk.clone(), Scope::everything());
                subscriptions.push((
                    gvk,
                    Filter {
                        namespaces: Vec::new(),
                        selector: Selector::everything(),
                        keys: None,
                        changes: None,
                        also: Vec::new(),
                    },
                ));
            }
        }
        for (i, q) in m.queries.iter().enumerate() {
            let gvk = check_gvk(format!("queries[{i}]"), q)?;
            scopes.insert(gvk.clone(), Scope::everything());
            if !cached.contains(&gvk) {
                cached.push(gvk);
            }
        }
        let mut indexes = Vec::new();
        for (i, x) in m.indexes.iter().enumerate() {
            let gvk = check_gvk(format!("indexes[{i}].gvk"), &x.gvk)?;
            check_name(format!("indexes[{i}].name"), &x.name)?;
            check_name(format!("indexes[{i}].json-pointer"), &x.json_pointer)?;
            if !cached.contains(&gvk) {
                return Err(error(
                    format!("indexes[{i}].gvk"),
                    format!("{gvk} is neither subscribed nor queried"),
                ));
            }
            if x.name.is_empty() || is_builtin(&x.name) {
                return Err(error(
                    format!("indexes[{i}].name"),
                    format!("{:?} is empty or a built-in index name", x.name),
                ));
            }
            check_pointer(format!("indexes[{i}].json-pointer"), &x.json_pointer)?;
            let keep = scopes
                .get(&gvk)
                .map(Scope::keep)
                .cloned()
                .unwrap_or_default();
            if !keep.holds(&x.json_pointer) {
                return Err(undeclared(
                    format!("indexes[{i}].json-pointer"),
                    &x.json_pointer,
                    &keep,
                ));
            }
            indexes.push(DeclaredIndex {
                gvk,
                name: x.name.clone(),
                func: IndexFunc::JsonPointer(x.json_pointer.clone()),
            });
        }
        check_count("types subscribed to and queried", cached.len(), MAX_TYPES)?;
        let resync = (m.resync_seconds > 0).then(|| Duration::from_secs(m.resync_seconds.into()));
        let schedules = schedules(&m.schedules)?;
        let admission = m.admission.as_ref().map(admission).transpose()?;
        let controller = m
            .controller
            .as_ref()
            .map(|c| controller::controller(c, &indexes))
            .transpose()?;
        let metrics = metrics::metrics(&m.metrics)?;
        Ok(Self {
            subscriptions,
            cached,
            scopes,
            indexes,
            resync,
            schedules,
            state: m.state,
            admission,
            controller,
            metrics,
        })
    }
}

/// The declared schedules, parsed; names unique.
fn schedules(declared: &[wit::Schedule]) -> Result<Vec<Schedule>, ManifestError> {
    check_count("schedules", declared.len(), MAX_SCHEDULES)?;
    let mut out: Vec<Schedule> = Vec::new();
    for (i, s) in declared.iter().enumerate() {
        if out.iter().any(|o| o.name == s.name) {
            return Err(error(
                format!("schedules[{i}].name"),
                format!("{:?} names another schedule too", s.name),
            ));
        }
        let schedule = Schedule::parse(&s.name, &s.cron, s.time_zone.as_deref(), s.jitter_seconds)
            .map_err(|(part, reason)| error(format!("schedules[{i}].{part}"), reason))?;
        out.push(schedule);
    }
    Ok(out)
}

impl Schedule {
    /// A schedule named `name` from its cron text, time zone and jitter; an error names the
    /// part that is wrong (`name`, `cron`, `time-zone`, `jitter-seconds`) and why.
    pub fn parse(
        name: &str,
        cron: &str,
        time_zone: Option<&str>,
        jitter_seconds: u32,
    ) -> Result<Self, (&'static str, String)> {
        let named = |part: &'static str| move |e: ManifestError| (part, e.reason);
        check_name(String::new(), name).map_err(named("name"))?;
        if name.is_empty() {
            return Err(("name", "empty".into()));
        }
        check_name(String::new(), cron).map_err(named("cron"))?;
        if let Some(zone) = time_zone {
            check_name(String::new(), zone).map_err(named("time-zone"))?;
            jiff::tz::TimeZone::get(zone).map_err(|e| ("time-zone", format!("{zone:?}: {e}")))?;
        }
        let parsed =
            crate::schedule::Cron::parse(cron, time_zone).map_err(|e| ("cron", e.to_string()))?;
        if jitter_seconds > MAX_JITTER_SECONDS {
            return Err((
                "jitter-seconds",
                format!("{jitter_seconds}: at most {MAX_JITTER_SECONDS}"),
            ));
        }
        Ok(Schedule {
            name: name.to_owned(),
            cron: parsed,
            text: cron.to_owned(),
            time_zone: time_zone.map(str::to_owned),
            jitter: Duration::from_secs(jitter_seconds.into()),
        })
    }
}

/// The schedules a plugin runs: its manifest's, each one the operator configured under the
/// same name replaced by the operator's, and the operator's other ones added.
pub fn with_configured(declared: &[Schedule], configured: &[Schedule]) -> Vec<Schedule> {
    let mut out: Vec<Schedule> = declared
        .iter()
        .filter(|d| !configured.iter().any(|c| c.name == d.name))
        .cloned()
        .collect();
    out.extend(configured.iter().cloned());
    out
}

/// The declared admission webhook, checked.
fn admission(a: &wit::Admission) -> Result<Admission, ManifestError> {
    check_count("admission.rules", a.rules.len(), MAX_ADMISSION_RULES)?;
    check_count(
        "admission.match-conditions",
        a.match_conditions.len(),
        MAX_ADMISSION_RULES,
    )?;
    if a.rules.is_empty() {
        return Err(error(
            "admission.rules".into(),
            "no rule: name the types and operations the webhook reviews",
        ));
    }
    let mut rules = Vec::new();
    for (i, r) in a.rules.iter().enumerate() {
        let gvk = check_gvk(format!("admission.rules[{i}].gvk"), &r.gvk)?;
        if r.operations.is_empty() {
            return Err(error(
                format!("admission.rules[{i}].operations"),
                "empty: name at least one operation",
            ));
        }
        let mut operations: Vec<Operation> = r
            .operations
            .iter()
            .map(|o| match o {
                wit::Operation::Create => Operation::Create,
                wit::Operation::Update => Operation::Update,
                wit::Operation::Delete => Operation::Delete,
                wit::Operation::Connect => Operation::Connect,
            })
            .collect();
        operations.sort();
        operations.dedup();
        for (j, sub) in r.subresources.iter().enumerate() {
            check_name(format!("admission.rules[{i}].subresources[{j}]"), sub)?;
        }
        rules.push(AdmissionRule {
            gvk,
            operations,
            subresources: r.subresources.clone(),
        });
    }
    let timeout = match a.timeout_seconds {
        0 => 10,
        t @ 1..=30 => t,
        t => {
            return Err(error(
                "admission.timeout-seconds".into(),
                format!("{t}: the API server takes 1 to 30"),
            ));
        }
    };
    if let Some(selector) = &a.namespace_selector {
        limits::selector(selector).map_err(|e| error("admission.namespace-selector".into(), e))?;
    }
    for (i, (name, expression)) in a.match_conditions.iter().enumerate() {
        check_name(format!("admission.match-conditions[{i}].name"), name)?;
        if expression.len() > MAX_CONDITION_BYTES {
            return Err(error(
                format!("admission.match-conditions[{i}]"),
                format!("{} bytes: at most {MAX_CONDITION_BYTES}", expression.len()),
            ));
        }
        check_printable(&format!("admission.match-conditions[{i}]"), expression)?;
    }
    Ok(Admission {
        mutating: a.mutating,
        rules,
        fail_open: a.failure_policy == wit::FailurePolicy::Ignore,
        timeout: Duration::from_secs(timeout.into()),
        namespace_selector: a.namespace_selector.clone(),
        match_conditions: a.match_conditions.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gvk(kind: &str) -> wit::Gvk {
        wit::Gvk {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
        }
    }

    fn subscription(kind: &str, selector: Option<&str>) -> wit::Subscription {
        wit::Subscription {
            gvk: gvk(kind),
            namespaces: Vec::new(),
            label_selector: selector.map(str::to_owned),
            changes: Vec::new(),
            fields: Vec::new(),
            metadata_only: false,
        }
    }

    fn manifest(subscriptions: Vec<wit::Subscription>, indexes: usize) -> wit::Manifest {
        wit::Manifest {
            subscriptions,
            queries: Vec::new(),
            indexes: (0..indexes)
                .map(|i| wit::Index {
                    gvk: gvk("Pod"),
                    name: format!("i{i}"),
                    json_pointer: "/spec/nodeName".into(),
                })
                .collect(),
            resync_seconds: 0,
            schedules: Vec::new(),
            state: false,
            admission: None,
            controller: None,
            metrics: Vec::new(),
        }
    }

    #[test]
    fn declared_fields_become_the_types_keep_and_bound_what_the_host_reads() {
        let declaring = |fields: &[&str], metadata_only: bool| wit::Subscription {
            fields: fields.iter().map(|f| (*f).to_owned()).collect(),
            metadata_only,
            ..subscription("Pod", None)
        };
        let phase = declaring(&["/status/phase", "/spec/nodeName"], false);
        let m = PluginManifest::validate(&manifest(vec![phase.clone()], 1)).expect("valid");
        assert_eq!(
            m.scope(&Gvk::new("", "v1", "Pod")).keep(),
            &Keep::fields(&["/spec/nodeName", "/status/phase"])
        );
        // With a subscription that declares nothing, the plugin reads whole pods.
        let both = vec![phase.clone(), subscription("Pod", Some("app=web"))];
        let m = PluginManifest::validate(&manifest(both, 0)).expect("valid");
        assert!(m.scope(&Gvk::new("", "v1", "Pod")).keep().is_whole());
        let meta = PluginManifest::validate(&manifest(vec![declaring(&[], true)], 0));
        let pod = Gvk::new("", "v1", "Pod");
        assert_eq!(meta.expect("valid").scope(&pod).keep(), &Keep::MetadataOnly);

        let refused = |s: wit::Subscription, indexes: usize| {
            PluginManifest::validate(&manifest(vec![s], indexes)).expect_err("refused")
        };
        let e = refused(declaring(&["/status"], true), 0);
        assert_eq!(e.field, "subscriptions[0].metadata-only");
        let e = refused(declaring(&["status"], false), 0);
        assert_eq!(e.field, "subscriptions[0].fields[0]");
        let filtered = wit::Subscription {
            changes: vec!["/spec".into()],
            ..declaring(&["/status/phase"], false)
        };
        let e = refused(filtered, 0);
        assert_eq!(e.field, "subscriptions[0].changes[0]");
        assert!(e.reason.contains("add it to `fields`"), "{e}");
        // The index reads /spec/nodeName, which a metadata-only subscription leaves out.
        let e = refused(declaring(&[], true), 1);
        assert_eq!(e.field, "indexes[0].json-pointer");
    }

    #[test]
    fn identical_subscriptions_fold_into_one() {
        let many = vec![subscription("Pod", Some("app=web")); MAX_LISTED_SUBSCRIPTIONS];
        let m = PluginManifest::validate(&manifest(many, 0)).expect("valid");
        assert_eq!(m.subscriptions.len(), 1);
        assert_eq!(m.cached.len(), 1);
    }

    #[test]
    fn counts_and_sizes_are_bounded() {
        let distinct: Vec<_> = (0..=MAX_SUBSCRIPTIONS)
            .map(|i| subscription("Pod", Some(&format!("n={i}"))))
            .collect();
        let e = PluginManifest::validate(&manifest(distinct, 0)).expect_err("too many");
        assert!(e.field.starts_with("subscriptions"), "{e}");
        let listed = vec![subscription("Pod", None); MAX_LISTED_SUBSCRIPTIONS + 1];
        assert!(PluginManifest::validate(&manifest(listed, 0)).is_err());
        let huge = "a".repeat(limits::MAX_SELECTOR_BYTES + 1);
        let e = PluginManifest::validate(&manifest(vec![subscription("Pod", Some(&huge))], 0))
            .expect_err("selector too long");
        assert!(e.to_string().len() < 200, "not echoed: {e}");
        let e =
            PluginManifest::validate(&manifest(vec![subscription("Pod", None)], MAX_INDEXES + 1))
                .expect_err("too many indexes");
        assert_eq!(e.field, "indexes");
    }

    #[test]
    fn change_filters_are_bounded_per_plugin_and_in_depth() {
        let with_changes = |i: usize, n: usize| wit::Subscription {
            changes: (0..n).map(|j| format!("/data/k{j}")).collect(),
            ..subscription("ConfigMap", Some(&format!("n={i}")))
        };
        let within: Vec<_> = (0..MAX_PLUGIN_CHANGES / MAX_CHANGES)
            .map(|i| with_changes(i, MAX_CHANGES))
            .collect();
        PluginManifest::validate(&manifest(within.clone(), 0)).expect("at the bound");
        let mut past = within;
        past.push(with_changes(99, 1));
        let e = PluginManifest::validate(&manifest(past, 0)).expect_err("one pointer too many");
        assert_eq!(
            e.field,
            "subscriptions[*].changes (all subscriptions together)"
        );
        let deep = wit::Subscription {
            changes: vec!["/a".repeat(MAX_CHANGE_DEPTH + 1)],
            ..subscription("ConfigMap", None)
        };
        let e = PluginManifest::validate(&manifest(vec![deep], 0)).expect_err("too deep");
        assert_eq!(e.field, "subscriptions[0].changes[0]");
        assert!(e.reason.contains("levels deep"), "{e}");
    }

    #[test]
    fn names_that_would_forge_a_log_line_are_refused_and_echoes_escaped() {
        let forged = "Pod\nERROR kubewasm::agent: forged";
        let e = PluginManifest::validate(&manifest(vec![subscription(forged, None)], 0))
            .expect_err("a kind with a line break");
        assert_eq!(e.field, "subscriptions[0].gvk");
        assert!(e.reason.contains("control character"), "{e}");
        let mut m = manifest(vec![subscription("Pod", None)], 1);
        m.indexes[0].name = "by-node\u{202e}".into();
        let e = PluginManifest::validate(&m).expect_err("a bidi override");
        assert_eq!(e.field, "indexes[0].name");
        // A selector that does not parse is echoed in the reason, escaped.
        let e = PluginManifest::validate(&manifest(
            vec![subscription("Pod", Some("a in (\n\u{1b}[2J"))],
            0,
        ))
        .expect_err("no selector");
        assert!(!e.to_string().contains(['\n', '\u{1b}']), "{e}");
    }
}
