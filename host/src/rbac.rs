//! The least-privilege RBAC for the host's service account: get, list and watch on exactly
//! the resource types its plugins read (in the namespaces they read them, when every plugin
//! reading a type names namespaces), exactly the writes the configuration grants them, and
//! the Lease it needs for leader election.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, GroupVersionKind};

use crate::gvk::{Gvk, plugin_resource};
use crate::write::WriteGrant;

/// Where the host runs: the names the generated objects use.
#[derive(Debug, Clone)]
pub struct Identity {
    /// Name of the ClusterRole, its binding, and the leader-election Role.
    pub name: String,
    /// Namespace of the service account (and of the Lease).
    pub namespace: String,
    /// The service account.
    pub service_account: String,
    /// Whether leader election is on (adds a Role on Leases in `namespace`).
    pub leader_election: bool,
    /// How replicas split the work, if they do (the Role on Leases also lists and deletes
    /// the members' Leases; by namespace, the namespaces are read, to cut slices by).
    pub sharding: Option<crate::shard::ShardKey>,
    /// Whether the host follows `KubewasmPlugin` objects (adds reading them and writing
    /// their status).
    pub plugin_resources: bool,
    /// Whether a plugin keeps state or has schedules (adds a Role on the ConfigMaps that
    /// keep them in `namespace`).
    pub plugin_state: bool,
}

/// Per resource type, the namespaces the host reads it in (`None`: cluster-wide).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reads(pub BTreeMap<Gvk, Option<BTreeSet<String>>>);

impl Reads {
    /// `types`, each read cluster-wide.
    pub fn everywhere(types: impl IntoIterator<Item = Gvk>) -> Self {
        Self(types.into_iter().map(|g| (g, None)).collect())
    }

    /// Adds a reader of `gvk` in `namespaces` (`None`: cluster-wide, which then wins).
    pub fn add(&mut self, gvk: &Gvk, namespaces: Option<&BTreeSet<String>>) {
        match self.0.get_mut(gvk) {
            None => {
                self.0.insert(gvk.clone(), namespaces.cloned());
            }
            Some(have) => match (have.as_mut(), namespaces) {
                (Some(have), Some(more)) => have.extend(more.iter().cloned()),
                _ => *have = None,
            },
        }
    }

    /// The types read, sorted.
    pub fn types(&self) -> impl Iterator<Item = &Gvk> {
        self.0.keys()
    }
}

/// The plural resource name of `gvk` (`Pod` → `pods`, `Ingress` → `ingresses`).
pub fn plural(gvk: &Gvk) -> String {
    ApiResource::from_gvk(&GroupVersionKind::gvk(&gvk.group, &gvk.version, &gvk.kind)).plural
}

/// Write rules: per namespace (`None`: cluster-wide), per API group and verb set, the
/// resources (`pods`, `pods/status`).
type WriteRules = BTreeMap<Option<String>, BTreeMap<(String, Vec<String>), BTreeSet<String>>>;

fn write_rules(writes: &[WriteGrant]) -> WriteRules {
    let mut rules = WriteRules::new();
    for grant in writes {
        let mut verbs: Vec<String> = grant.verbs.iter().map(|v| v.as_str().to_owned()).collect();
        verbs.sort();
        verbs.dedup();
        let namespaces: Vec<Option<String>> = match &grant.namespaces {
            None => vec![None],
            Some(list) => list.iter().cloned().map(Some).collect(),
        };
        for ns in namespaces {
            for gvk in &grant.resources {
                let resources = rules
                    .entry(ns.clone())
                    .or_default()
                    .entry((gvk.group.clone(), verbs.clone()))
                    .or_default();
                let plural = plural(gvk);
                for sub in &grant.subresources {
                    resources.insert(format!("{plural}/{sub}"));
                }
                resources.insert(plural);
            }
        }
    }
    rules
}

/// The RBAC objects as one multi-document YAML text. `types` are what the plugins read,
/// `writes` what the configuration grants them to write; `sources` says where they came
/// from, for the header comment.
pub fn render(types: &Reads, writes: &[WriteGrant], identity: &Identity, sources: &str) -> String {
    let mut groups: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    // Reads in named namespaces only: per namespace, per group, the plurals.
    let mut scoped: BTreeMap<&str, BTreeMap<&str, BTreeSet<String>>> = BTreeMap::new();
    for (gvk, namespaces) in &types.0 {
        match namespaces {
            None => {
                groups.entry(&gvk.group).or_default().insert(plural(gvk));
            }
            Some(namespaces) => {
                for ns in namespaces {
                    scoped
                        .entry(ns)
                        .or_default()
                        .entry(&gvk.group)
                        .or_default()
                        .insert(plural(gvk));
                }
            }
        }
    }
    let mut writes = write_rules(writes);
    let cluster_writes = writes.remove(&None).unwrap_or_default();
    let Identity {
        name,
        namespace,
        service_account,
        leader_election,
        sharding,
        plugin_resources,
        plugin_state,
    } = identity;
    let meta = |name: &str, namespace: Option<&str>| ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        ..ObjectMeta::default()
    };
    let rule = |group: &str, resources: Vec<String>, verbs: &[&str]| PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(resources),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        ..PolicyRule::default()
    };
    let subjects = Some(vec![Subject {
        kind: "ServiceAccount".into(),
        name: service_account.clone(),
        namespace: Some(namespace.clone()),
        ..Subject::default()
    }]);
    let role_ref = |kind: &str, name: &str| RoleRef {
        api_group: "rbac.authorization.k8s.io".into(),
        kind: kind.into(),
        name: name.into(),
    };
    let write_rule = |((group, verbs), resources): ((String, Vec<String>), BTreeSet<String>)| {
        let verbs: Vec<&str> = verbs.iter().map(String::as_str).collect();
        rule(&group, resources.into_iter().collect(), &verbs)
    };
    let read_rules = |groups: BTreeMap<&str, BTreeSet<String>>| -> Vec<PolicyRule> {
        groups
            .into_iter()
            .map(|(group, resources)| {
                rule(
                    group,
                    resources.into_iter().collect(),
                    &["get", "list", "watch"],
                )
            })
            .collect()
    };
    let cluster_role_rules: Vec<PolicyRule> = read_rules(groups)
        .into_iter()
        .chain(cluster_writes.into_iter().map(write_rule))
        .chain(plugin_resources.then(|| {
            rule(
                plugin_resource::GROUP,
                vec![plugin_resource::PLURAL.into()],
                &["get", "list", "watch"],
            )
        }))
        .chain(plugin_resources.then(|| {
            rule(
                plugin_resource::GROUP,
                vec![format!("{}/status", plugin_resource::PLURAL)],
                &["patch"],
            )
        }))
        .chain(
            (*sharding == Some(crate::shard::ShardKey::Namespace))
                .then(|| rule("", vec!["namespaces".into()], &["get", "list", "watch"])),
        )
        .collect();
    // A host whose plugins read and write only in named namespaces needs no cluster-wide
    // rights at all: a team can run it with Roles in its own namespaces.
    let needs_cluster_role = !cluster_role_rules.is_empty() || scoped.is_empty();
    let header = format!(
        "Generated by `kubewasm rbac` for {sources}: get, list and watch on exactly the\n\
         resource types these plugins subscribe to or query (as granted), in the namespaces\n\
         they name where all of them name some, and exactly the writes the configuration\n\
         grants them (grants.writes), nothing else."
    );
    // A Role `role` in `ns` with `rules` (after `comment`), and its binding to the host's
    // service account.
    let bound_role = |comment: String, role: &str, ns: &str, rules: Vec<PolicyRule>| {
        [
            (
                comment,
                yaml(&Role {
                    metadata: meta(role, Some(ns)),
                    rules: Some(rules),
                }),
            ),
            (
                String::new(),
                yaml(&RoleBinding {
                    metadata: meta(role, Some(ns)),
                    role_ref: role_ref("Role", role),
                    subjects: subjects.clone(),
                }),
            ),
        ]
    };
    let mut documents: Vec<(String, String)> = Vec::new();
    if needs_cluster_role {
        documents.push((
            String::new(),
            yaml(&ClusterRole {
                metadata: meta(name, None),
                rules: Some(cluster_role_rules),
                ..ClusterRole::default()
            }),
        ));
        documents.push((
            String::new(),
            yaml(&ClusterRoleBinding {
                metadata: meta(name, None),
                role_ref: role_ref("ClusterRole", name),
                subjects: subjects.clone(),
            }),
        ));
    }
    let reads_name = format!("{name}-reads");
    for (ns, groups) in scoped {
        documents.extend(bound_role(
            format!(
                "Reads in namespace {ns}: every plugin reading these types names its namespaces."
            ),
            &reads_name,
            ns,
            read_rules(groups),
        ));
    }
    if *leader_election || sharding.is_some() {
        let (what, verbs): (&str, &[&str]) = if sharding.is_some() {
            (
                "Leader election and sharding: the leader's Lease and one per member, in the host's namespace.",
                &["get", "list", "create", "update", "delete"],
            )
        } else {
            (
                "Leader election: one Lease in the host's namespace.",
                &["get", "create", "update"],
            )
        };
        documents.extend(bound_role(
            what.into(),
            &format!("{name}-leader-election"),
            namespace,
            vec![rule("coordination.k8s.io", vec!["leases".into()], verbs)],
        ));
    }
    if *plugin_state {
        documents.extend(bound_role(
            "Plugin state and schedules, kept by the leader in ConfigMaps of the host's namespace."
                .into(),
            &format!("{name}-plugin-state"),
            namespace,
            vec![rule(
                "",
                vec!["configmaps".into()],
                &["get", "list", "create", "patch"],
            )],
        ));
    }
    let role_name = format!("{name}-writes");
    for (ns, rules) in writes {
        let Some(ns) = ns else { continue };
        documents.extend(bound_role(
            format!("Writes granted in namespace {ns}."),
            &role_name,
            &ns,
            rules.into_iter().map(write_rule).collect(),
        ));
    }
    let mut out = String::new();
    for line in header.lines() {
        out.push_str("# ");
        out.push_str(line.trim_start());
        out.push('\n');
    }
    for (i, (comment, document)) in documents.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        for line in comment.lines() {
            out.push_str("# ");
            out.push_str(line.trim_start());
            out.push('\n');
        }
        out.push_str(document);
    }
    out
}

/// One object as a YAML document (names are quoted where YAML needs it).
fn yaml(object: &impl serde::Serialize) -> String {
    // Serializing plain data into a string does not fail.
    serde_saphyr::to_string(object).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(name: &str) -> Identity {
        Identity {
            name: name.into(),
            namespace: "ops".into(),
            service_account: "agent".into(),
            leader_election: false,
            sharding: None,
            plugin_resources: false,
            plugin_state: false,
        }
    }

    /// The documents of `yaml`, each read back as the type it must be.
    fn read_back(yaml: &str) -> (ClusterRole, ClusterRoleBinding, Option<(Role, RoleBinding)>) {
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml).expect("valid YAML");
        fn typed<T: serde::de::DeserializeOwned>(
            docs: &[serde_json::Value],
            i: usize,
        ) -> Option<T> {
            docs.get(i)
                .map(|d| serde_json::from_value(d.clone()).expect("the expected type"))
        }
        let role = typed(&docs, 0).expect("a ClusterRole");
        let binding = typed(&docs, 1).expect("a binding");
        let election = typed::<Role>(&docs, 2).zip(typed::<RoleBinding>(&docs, 3));
        (role, binding, election)
    }

    #[test]
    fn groups_plurals_and_nothing_more() {
        let types = Reads::everywhere([
            Gvk::new("", "v1", "Pod"),
            Gvk::new("apps", "v1", "Deployment"),
            Gvk::new("apps", "v1", "ReplicaSet"),
            Gvk::new("networking.k8s.io", "v1", "Ingress"),
            Gvk::new("", "v1", "Endpoints"),
        ]);
        let yaml = render(&types, &[], &identity("kubewasm"), "test");
        let (role, binding, election) = read_back(&yaml);
        let rules: Vec<(Vec<String>, Vec<String>, Vec<String>)> = role
            .rules
            .unwrap_or_default()
            .into_iter()
            .map(|r| {
                (
                    r.api_groups.unwrap_or_default(),
                    r.resources.unwrap_or_default(),
                    r.verbs,
                )
            })
            .collect();
        let watch = vec!["get".to_owned(), "list".into(), "watch".into()];
        assert_eq!(
            rules,
            [
                (
                    vec!["".into()],
                    vec!["endpoints".into(), "pods".into()],
                    watch.clone()
                ),
                (
                    vec!["apps".into()],
                    vec!["deployments".into(), "replicasets".into()],
                    watch.clone()
                ),
                (
                    vec!["networking.k8s.io".into()],
                    vec!["ingresses".into()],
                    watch
                ),
            ]
        );
        let subject = &binding.subjects.expect("subjects")[0];
        assert_eq!(
            (subject.name.as_str(), subject.namespace.as_deref()),
            ("agent", Some("ops"))
        );
        assert!(election.is_none(), "{yaml}");
        assert!(
            yaml.starts_with("# Generated by `kubewasm rbac` for test"),
            "{yaml}"
        );

        let mut leading = identity("kubewasm");
        leading.leader_election = true;
        let (_, _, election) = read_back(&render(&types, &[], &leading, "test"));
        let (role, binding) = election.expect("the election role");
        let rules = role.rules.expect("rules");
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["leases".to_owned()][..])
        );
        assert_eq!(binding.role_ref.name, "kubewasm-leader-election");
        assert_eq!(
            rules[0].verbs,
            ["get", "create", "update"],
            "an election lists and deletes nothing"
        );
        let namespaces_read = |role: &ClusterRole| {
            role.rules.iter().flatten().any(|r| {
                r.resources.as_deref() == Some(&["namespaces".to_owned()][..])
                    && r.verbs == ["get", "list", "watch"]
            })
        };
        for key in [
            crate::shard::ShardKey::Namespace,
            crate::shard::ShardKey::Uid,
        ] {
            let mut member = identity("kubewasm");
            member.sharding = Some(key);
            let (cluster, _, election) = read_back(&render(&types, &[], &member, "test"));
            let (role, _) = election.expect("members need the Lease role too");
            let verbs = &role.rules.expect("rules")[0].verbs;
            for verb in ["list", "delete", "update"] {
                assert!(verbs.iter().any(|v| v == verb), "{verb} in {verbs:?}");
            }
            // By namespace, the first member cuts slices by the namespaces there are.
            assert_eq!(
                namespaces_read(&cluster),
                key == crate::shard::ShardKey::Namespace
            );
        }
    }

    #[test]
    fn writes_become_exactly_the_granted_verbs_cluster_wide_or_per_namespace() {
        use crate::write::Verb;
        let pod = Gvk::new("", "v1", "Pod");
        let writes = [
            WriteGrant {
                resources: vec![pod.clone()],
                subresources: vec!["status".into()],
                verbs: vec![Verb::Patch],
                namespaces: None,
            },
            WriteGrant {
                resources: vec![crate::write::event_gvk()],
                subresources: vec![],
                verbs: vec![Verb::Patch, Verb::Create],
                namespaces: Some(vec!["shop".into(), "web".into()]),
            },
        ];
        let yaml = render(
            &Reads::everywhere([pod]),
            &writes,
            &identity("kubewasm"),
            "test",
        );
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("valid YAML");
        let role: ClusterRole = serde_json::from_value(docs[0].clone()).expect("ClusterRole");
        let rules = role.rules.expect("rules");
        assert_eq!(rules.len(), 2, "{yaml}");
        assert_eq!(
            rules[1].resources.as_deref(),
            Some(&["pods".to_owned(), "pods/status".into()][..])
        );
        assert_eq!(rules[1].verbs, ["patch"]);
        let roles: Vec<Role> = docs[2..]
            .iter()
            .step_by(2)
            .map(|d| serde_json::from_value(d.clone()).expect("Role"))
            .collect();
        let namespaces: Vec<_> = roles
            .iter()
            .map(|r| r.metadata.namespace.clone().unwrap_or_default())
            .collect();
        assert_eq!(namespaces, ["shop", "web"], "{yaml}");
        let rule = &roles[0].rules.as_ref().expect("rules")[0];
        assert_eq!(
            rule.api_groups.as_deref(),
            Some(&["events.k8s.io".to_owned()][..])
        );
        assert_eq!(rule.resources.as_deref(), Some(&["events".to_owned()][..]));
        assert_eq!(rule.verbs, ["create", "patch"]);
        let binding: RoleBinding = serde_json::from_value(docs[3].clone()).expect("RoleBinding");
        assert_eq!(binding.role_ref.name, "kubewasm-writes");
    }

    #[test]
    fn names_that_mean_something_in_yaml_stay_names() {
        for name in ["yes", "#x", "a: b", "0755", "null", "- x", "{a}"] {
            let yaml = render(&Reads::default(), &[], &identity(name), "test");
            let (role, binding, _) = read_back(&yaml);
            assert_eq!(role.metadata.name.as_deref(), Some(name), "{yaml}");
            assert_eq!(binding.role_ref.name, name, "{yaml}");
        }
    }

    #[test]
    fn reads_named_namespaces_only_become_roles_there_and_no_cluster_role() {
        let mut reads = Reads::default();
        let shop: BTreeSet<String> = ["shop".to_owned()].into();
        let both: BTreeSet<String> = ["shop".to_owned(), "web".to_owned()].into();
        reads.add(&Gvk::new("", "v1", "ConfigMap"), Some(&shop));
        reads.add(&Gvk::new("", "v1", "ConfigMap"), Some(&both));
        reads.add(&Gvk::new("apps", "v1", "Deployment"), Some(&shop));
        let yaml = render(&reads, &[], &identity("team"), "test");
        assert!(yaml.starts_with("# Generated by `kubewasm rbac`"), "{yaml}");
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("valid YAML");
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            ["Role", "RoleBinding", "Role", "RoleBinding"],
            "{yaml}"
        );
        let role = |i: usize| -> Role { serde_json::from_value(docs[i].clone()).expect("Role") };
        let (shop_role, web_role) = (role(0), role(2));
        assert_eq!(shop_role.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(shop_role.metadata.name.as_deref(), Some("team-reads"));
        let plurals = |r: &Role| -> Vec<String> {
            r.rules
                .iter()
                .flatten()
                .flat_map(|rule| rule.resources.clone().unwrap_or_default())
                .collect()
        };
        assert_eq!(plurals(&shop_role), ["configmaps", "deployments"]);
        assert_eq!(plurals(&web_role), ["configmaps"]);

        // One plugin reading ConfigMaps everywhere makes them cluster-wide again.
        reads.add(&Gvk::new("", "v1", "ConfigMap"), None);
        let yaml = render(&reads, &[], &identity("team"), "test");
        let (cluster, _, _) = read_back(&yaml);
        let rules = cluster.rules.expect("rules");
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["configmaps".to_owned()][..])
        );
        assert!(
            yaml.contains("namespace: shop") && !yaml.contains("namespace: web"),
            "{yaml}"
        );
    }
}
