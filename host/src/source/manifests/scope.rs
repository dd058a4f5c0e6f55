//! Which kinds are namespaced, as kubectl would learn it from the API server: the built-in
//! types, and the CustomResourceDefinitions found in the folder. A namespaced object written
//! without a namespace lands in `default`; a cluster-scoped one loses the namespace it was
//! given; a kind neither built in nor defined in the folder is taken as written.

use std::collections::HashMap;

use serde_json::Value;

use crate::gvk::Gvk;

/// Where a namespaced object written without a namespace lands, as with kubectl, unless the
/// host configuration's `defaultNamespace` says otherwise.
pub const DEFAULT_NAMESPACE: &str = "default";

/// The API groups the API server serves itself (a kind in one of them is built in).
const BUILTIN_GROUPS: &[&str] = &[
    "",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "apiregistration.k8s.io",
    "apps",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "coordination.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "flowcontrol.apiserver.k8s.io",
    "internal.apiserver.k8s.io",
    "networking.k8s.io",
    "node.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "resource.k8s.io",
    "scheduling.k8s.io",
    "storage.k8s.io",
    "storagemigration.k8s.io",
];

/// The built-in cluster-scoped kinds (Kubernetes 1.34), by group; every other built-in kind
/// is namespaced.
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "ComponentStatus"),
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("admissionregistration.k8s.io", "MutatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicyBinding",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    ("authentication.k8s.io", "SelfSubjectReview"),
    ("authentication.k8s.io", "TokenReview"),
    ("authorization.k8s.io", "SelfSubjectAccessReview"),
    ("authorization.k8s.io", "SelfSubjectRulesReview"),
    ("authorization.k8s.io", "SubjectAccessReview"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("certificates.k8s.io", "ClusterTrustBundle"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("internal.apiserver.k8s.io", "StorageVersion"),
    ("networking.k8s.io", "IPAddress"),
    ("networking.k8s.io", "IngressClass"),
    ("networking.k8s.io", "ServiceCIDR"),
    ("node.k8s.io", "RuntimeClass"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("resource.k8s.io", "DeviceClass"),
    ("resource.k8s.io", "DeviceTaintRule"),
    ("resource.k8s.io", "ResourceSlice"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("storage.k8s.io", "VolumeAttributesClass"),
    ("storagemigration.k8s.io", "StorageVersionMigration"),
];

/// API versions of built-in groups that no current API server serves, and the release that
/// removed them: kubectl answers "no matches for kind" for them, and so does the folder, rather
/// than guess where their objects would land. `None` for the kind: every kind of that version.
const REMOVED: &[(&str, &str, Option<&str>, &str)] = &[
    ("extensions", "v1beta1", None, "1.22"),
    ("apps", "v1beta1", None, "1.16"),
    ("apps", "v1beta2", None, "1.16"),
    ("policy", "v1beta1", None, "1.25"),
    ("batch", "v1beta1", None, "1.25"),
    ("batch", "v2alpha1", None, "1.21"),
    ("autoscaling", "v2beta1", None, "1.25"),
    ("autoscaling", "v2beta2", None, "1.26"),
    ("networking.k8s.io", "v1beta1", Some("Ingress"), "1.22"),
    ("networking.k8s.io", "v1beta1", Some("IngressClass"), "1.22"),
    ("rbac.authorization.k8s.io", "v1beta1", None, "1.22"),
    ("rbac.authorization.k8s.io", "v1alpha1", None, "1.22"),
    ("apiextensions.k8s.io", "v1beta1", None, "1.22"),
    ("apiregistration.k8s.io", "v1beta1", None, "1.22"),
    (
        "admissionregistration.k8s.io",
        "v1beta1",
        Some("MutatingWebhookConfiguration"),
        "1.22",
    ),
    (
        "admissionregistration.k8s.io",
        "v1beta1",
        Some("ValidatingWebhookConfiguration"),
        "1.22",
    ),
    ("certificates.k8s.io", "v1beta1", None, "1.22"),
    ("coordination.k8s.io", "v1beta1", Some("Lease"), "1.22"),
    ("scheduling.k8s.io", "v1beta1", None, "1.22"),
    ("scheduling.k8s.io", "v1alpha1", None, "1.22"),
    ("storage.k8s.io", "v1beta1", Some("CSIDriver"), "1.22"),
    ("storage.k8s.io", "v1beta1", Some("CSINode"), "1.22"),
    ("storage.k8s.io", "v1beta1", Some("StorageClass"), "1.22"),
    (
        "storage.k8s.io",
        "v1beta1",
        Some("VolumeAttachment"),
        "1.22",
    ),
    (
        "storage.k8s.io",
        "v1beta1",
        Some("CSIStorageCapacity"),
        "1.27",
    ),
    ("events.k8s.io", "v1beta1", None, "1.25"),
    ("discovery.k8s.io", "v1beta1", None, "1.25"),
    ("node.k8s.io", "v1beta1", None, "1.25"),
    ("flowcontrol.apiserver.k8s.io", "v1beta1", None, "1.26"),
    ("flowcontrol.apiserver.k8s.io", "v1beta2", None, "1.29"),
];

/// Why no API server serves `gvk`, if none does: a version removed in a past release, or a
/// kind or version a built-in group never had (`v1 Deployment`, `policy/v1
/// PodSecurityPolicy`). Groups of other names (`gateway.networking.k8s.io` included) are
/// served by whatever defines them, so nothing is said of them.
pub fn unserved(gvk: &Gvk) -> Option<String> {
    if let Some((_, _, _, release)) = REMOVED.iter().find(|(group, version, kind, _)| {
        *group == gvk.group && *version == gvk.version && kind.is_none_or(|k| k == gvk.kind)
    }) {
        return Some(format!(
            "no matches for kind {:?} in version {:?}: that version was removed in Kubernetes {release} (kubectl refuses it too); write a version served today",
            gvk.kind,
            gvk.api_version()
        ));
    }
    if !BUILTIN_GROUPS.contains(&gvk.group.as_str()) {
        return None;
    }
    // Every document of a folder passes here: nothing is allocated unless it is refused.
    let mut elsewhere = super::served::SERVED
        .iter()
        .filter(|(_, kinds)| kinds.contains(&gvk.kind.as_str()))
        .map(|(v, _)| *v)
        .peekable();
    let is_this = |v: &str| match v.split_once('/') {
        Some((group, version)) => group == gvk.group && version == gvk.version,
        None => gvk.group.is_empty() && v == gvk.version,
    };
    if elsewhere.clone().any(is_this) {
        return None;
    }
    let hint = if elsewhere.peek().is_none() {
        let group = if gvk.group.is_empty() {
            "the core group (v1)".to_owned()
        } else {
            format!("group {}", gvk.group)
        };
        format!("{group} has no kind {:?}", gvk.kind)
    } else {
        format!(
            "{} is served as {}",
            gvk.kind,
            elsewhere.collect::<Vec<_>>().join(", ")
        )
    };
    Some(format!(
        "no matches for kind {:?} in version {:?}: {hint} (kubectl refuses it too)",
        gvk.kind,
        gvk.api_version()
    ))
}

/// Whether a kind's objects live in a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// In a namespace (`default` when none is written).
    Namespaced,
    /// Not in any namespace (a written one is ignored).
    Cluster,
    /// Neither built in nor defined in the folder: taken as written.
    Unknown,
}

/// A kind a CustomResourceDefinition in the folder defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Defined {
    /// `spec.group`.
    pub group: String,
    /// `spec.names.kind`.
    pub kind: String,
    /// `spec.scope` is `Cluster`.
    pub cluster: bool,
}

impl Defined {
    /// What `value` defines, when it is a CustomResourceDefinition.
    pub fn from_crd(value: &Value) -> Option<Self> {
        let text = |p: &str| value.pointer(p).and_then(Value::as_str);
        let api_version = text("/apiVersion")?;
        if text("/kind")? != "CustomResourceDefinition"
            || !api_version.starts_with("apiextensions.k8s.io/")
        {
            return None;
        }
        Some(Self {
            group: text("/spec/group")?.to_owned(),
            kind: text("/spec/names/kind")?.to_owned(),
            cluster: text("/spec/scope")? == "Cluster",
        })
    }
}

/// The scope of every kind the folder can hold, and where namespaced objects written without
/// a namespace land.
#[derive(Debug)]
pub struct Scopes {
    defined: HashMap<(String, String), bool>,
    default_namespace: String,
}

/// Kinds a CustomResourceDefinition of the folder defined at some point, with their scope: a
/// removed definition leaves its objects where they were rather than moving them to another
/// key (a delete and an add) under a guessed scope.
pub type Remembered = HashMap<(String, String), bool>;

impl Default for Scopes {
    /// The built-in kinds only, with [`DEFAULT_NAMESPACE`].
    fn default() -> Self {
        Self::new(DEFAULT_NAMESPACE)
    }
}

impl Scopes {
    /// The built-in kinds only; namespaced objects without a namespace land in `namespace`.
    pub fn new(default_namespace: &str) -> Self {
        Self {
            defined: HashMap::new(),
            default_namespace: default_namespace.to_owned(),
        }
    }

    /// Adds a kind a CustomResourceDefinition in the folder defines.
    pub fn define(&mut self, d: &Defined) {
        self.defined
            .insert((d.group.clone(), d.kind.clone()), d.cluster);
    }

    /// Remembers every kind defined now in `remembered`, and takes the scope of those it
    /// remembers but no definition gives any more.
    pub fn remember(&mut self, remembered: &mut Remembered) {
        for (kind, cluster) in &self.defined {
            remembered.insert(kind.clone(), *cluster);
        }
        for (kind, cluster) in remembered.iter() {
            self.defined.entry(kind.clone()).or_insert(*cluster);
        }
    }

    /// The scope of `gvk`.
    pub fn of(&self, gvk: &Gvk) -> Scope {
        if BUILTIN_GROUPS.contains(&gvk.group.as_str()) {
            return if CLUSTER_SCOPED.contains(&(gvk.group.as_str(), gvk.kind.as_str())) {
                Scope::Cluster
            } else {
                Scope::Namespaced
            };
        }
        match self.defined.get(&(gvk.group.clone(), gvk.kind.clone())) {
            Some(true) => Scope::Cluster,
            Some(false) => Scope::Namespaced,
            None => Scope::Unknown,
        }
    }

    /// The namespace an object of `gvk` written with `namespace` lands in.
    pub fn namespace<'a>(&'a self, gvk: &Gvk, namespace: Option<&'a str>) -> Option<&'a str> {
        match self.of(gvk) {
            Scope::Cluster => None,
            Scope::Namespaced => Some(namespace.unwrap_or(&self.default_namespace)),
            Scope::Unknown => namespace,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::any::TypeId;

    use k8s_openapi::{ClusterResourceScope, Resource};

    use super::*;

    /// The table agrees with k8s-openapi's scope of the type.
    fn agrees<T: Resource + 'static>() {
        let cluster = TypeId::of::<T::Scope>() == TypeId::of::<ClusterResourceScope>();
        let gvk = Gvk::new(T::GROUP, T::VERSION, T::KIND);
        let expected = if cluster {
            Scope::Cluster
        } else {
            Scope::Namespaced
        };
        assert_eq!(Scopes::default().of(&gvk), expected, "{gvk}");
    }

    #[test]
    fn built_in_scopes_agree_with_k8s_openapi() {
        use k8s_openapi::api::{
            admissionregistration::v1 as adm, apps::v1 as apps, batch::v1 as batch,
            certificates::v1 as cert, coordination::v1 as coord, core::v1 as core,
            discovery::v1 as disc, events::v1 as events, flowcontrol::v1 as flow,
            networking::v1 as net, node::v1 as node, policy::v1 as policy, rbac::v1 as rbac,
            resource::v1 as res, scheduling::v1 as sched, storage::v1 as storage,
        };
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
        use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as reg;
        agrees::<core::Namespace>();
        agrees::<core::Node>();
        agrees::<core::PersistentVolume>();
        agrees::<core::ComponentStatus>();
        agrees::<core::Pod>();
        agrees::<core::ConfigMap>();
        agrees::<core::Secret>();
        agrees::<core::Service>();
        agrees::<core::PersistentVolumeClaim>();
        agrees::<apps::Deployment>();
        agrees::<batch::CronJob>();
        agrees::<policy::PodDisruptionBudget>();
        agrees::<coord::Lease>();
        agrees::<disc::EndpointSlice>();
        agrees::<events::Event>();
        agrees::<adm::MutatingWebhookConfiguration>();
        agrees::<adm::ValidatingWebhookConfiguration>();
        agrees::<adm::ValidatingAdmissionPolicy>();
        agrees::<adm::ValidatingAdmissionPolicyBinding>();
        agrees::<ext::CustomResourceDefinition>();
        agrees::<reg::APIService>();
        agrees::<cert::CertificateSigningRequest>();
        agrees::<flow::FlowSchema>();
        agrees::<flow::PriorityLevelConfiguration>();
        agrees::<net::IngressClass>();
        agrees::<net::IPAddress>();
        agrees::<net::ServiceCIDR>();
        agrees::<net::Ingress>();
        agrees::<net::NetworkPolicy>();
        agrees::<node::RuntimeClass>();
        agrees::<rbac::ClusterRole>();
        agrees::<rbac::ClusterRoleBinding>();
        agrees::<rbac::Role>();
        agrees::<rbac::RoleBinding>();
        agrees::<res::DeviceClass>();
        agrees::<res::ResourceSlice>();
        agrees::<res::ResourceClaim>();
        agrees::<sched::PriorityClass>();
        agrees::<storage::CSIDriver>();
        agrees::<storage::CSINode>();
        agrees::<storage::StorageClass>();
        agrees::<storage::VolumeAttachment>();
        agrees::<storage::VolumeAttributesClass>();
    }

    #[test]
    fn versions_no_server_serves_are_named_with_their_release() {
        let removed = unserved;
        let psp = Gvk::new("policy", "v1beta1", "PodSecurityPolicy");
        let refused = removed(&psp).expect("removed");
        assert!(
            refused.contains("1.25") && refused.contains("no matches"),
            "{refused}"
        );
        assert!(removed(&Gvk::new("extensions", "v1beta1", "Deployment")).is_some());
        assert!(removed(&Gvk::new("networking.k8s.io", "v1beta1", "Ingress")).is_some());
        assert!(removed(&Gvk::new("networking.k8s.io", "v1beta1", "IPAddress")).is_none());
        assert!(removed(&Gvk::new("policy", "v1", "PodDisruptionBudget")).is_none());
        assert!(removed(&Gvk::new("example.com", "v1beta1", "Widget")).is_none());
    }

    #[test]
    fn kinds_and_versions_a_built_in_group_never_had_are_refused() {
        for (api_version, kind, says) in [
            ("v1", "Deployment", "Deployment is served as apps/v1"),
            ("policy/v1", "PodSecurityPolicy", "group policy has no kind"),
            ("v1", "DeploymentConfig", "the core group (v1) has no kind"),
            (
                "admissionregistration.k8s.io/v1alpha1",
                "InitializerConfiguration",
                "group admissionregistration.k8s.io has no kind",
            ),
            ("apps/v2", "Deployment", "served as apps/v1"),
        ] {
            let gvk = Gvk::from_api_version(api_version, kind);
            let refused = unserved(&gvk).unwrap_or_else(|| panic!("{gvk} is refused"));
            assert!(
                refused.starts_with("no matches for kind") && refused.contains(says),
                "{refused}"
            );
        }
        for (api_version, kind) in [
            ("v1", "Pod"),
            ("apps/v1", "Deployment"),
            ("autoscaling/v2", "HorizontalPodAutoscaler"),
            ("resource.k8s.io/v1beta2", "ResourceClaim"),
            // Groups named like built-in ones that something else serves.
            ("gateway.networking.k8s.io/v1", "Gateway"),
            ("snapshot.storage.k8s.io/v1", "VolumeSnapshot"),
            ("metrics.k8s.io/v1beta1", "PodMetrics"),
            ("apps.openshift.io/v1", "DeploymentConfig"),
        ] {
            let gvk = Gvk::from_api_version(api_version, kind);
            assert_eq!(unserved(&gvk), None, "{gvk}");
        }
    }

    /// Every kind k8s-openapi gives a scope to is served under its own version.
    #[test]
    fn the_served_table_holds_every_kind_with_a_known_scope() {
        for (version, kinds) in super::super::served::SERVED {
            for kind in *kinds {
                let gvk = Gvk::from_api_version(version, kind);
                assert!(
                    BUILTIN_GROUPS.contains(&gvk.group.as_str()),
                    "{gvk}: its group is built in"
                );
            }
        }
        for (group, kind) in CLUSTER_SCOPED {
            assert!(
                super::super::served::SERVED
                    .iter()
                    .any(|(v, kinds)| kinds.contains(kind)
                        && Gvk::from_api_version(v, kind).group == *group),
                "{group} {kind}"
            );
        }
    }

    #[test]
    fn a_kind_whose_definition_went_keeps_its_scope() {
        let crd = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                     "names": {"kind": "Widget", "plural": "widgets"}},
        });
        let widget = Gvk::new("example.com", "v1", "Widget");
        let mut remembered = Remembered::new();
        let mut with = Scopes::default();
        with.define(&Defined::from_crd(&crd).expect("a definition"));
        with.remember(&mut remembered);
        let mut without = Scopes::default();
        assert_eq!(
            without.namespace(&widget, None),
            None,
            "a guess without memory"
        );
        without.remember(&mut remembered);
        assert_eq!(without.namespace(&widget, None), Some("default"));
    }

    #[test]
    fn custom_kinds_take_their_scope_from_a_definition_in_the_folder() {
        let crd = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "clusterissuers.cert-manager.io"},
            "spec": {"group": "cert-manager.io", "scope": "Cluster",
                     "names": {"kind": "ClusterIssuer", "plural": "clusterissuers"}},
        });
        let issuer = Gvk::new("cert-manager.io", "v1", "ClusterIssuer");
        let mut scopes = Scopes::default();
        assert_eq!(scopes.of(&issuer), Scope::Unknown);
        assert_eq!(scopes.namespace(&issuer, Some("x")), Some("x"));
        scopes.define(&Defined::from_crd(&crd).expect("a definition"));
        assert_eq!(scopes.namespace(&issuer, Some("x")), None);
        let pod = Gvk::new("", "v1", "Pod");
        assert_eq!(scopes.namespace(&pod, None), Some("default"));
        // A look-alike group is not built in.
        let gateway = Gvk::new("gateway.networking.k8s.io", "v1", "GatewayClass");
        assert_eq!(scopes.of(&gateway), Scope::Unknown);
    }
}
