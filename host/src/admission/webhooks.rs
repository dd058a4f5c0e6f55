//! The Validating and MutatingWebhookConfiguration that send the API server's reviews to
//! the plugins that declare admission: what `kubewasm webhooks` prints and the Helm chart
//! renders.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use kubewasm_sdk::selector::{Operator, Selector};

use crate::plugins::manifest::Admission;
use crate::rbac::plural;

/// The label every namespace carries with its own name (set by the API server).
const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";

/// Where the API server reaches the host's webhooks.
#[derive(Debug, Clone)]
pub enum Target {
    /// A Service in front of the host's pods.
    Service {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its port.
        port: u16,
    },
    /// A base URL (`https://127.0.0.1:8443`), for a host outside the cluster.
    Url(String),
}

/// The name of a plugin's webhook (it must look like a domain name).
pub fn webhook_name(plugin: &str) -> String {
    format!("{plugin}.kubewasm.dev")
}

/// A label selector written in Kubernetes' syntax as a `LabelSelector` object.
pub fn label_selector(text: &str) -> Result<LabelSelector, String> {
    let selector = Selector::parse(text).map_err(|e| e.to_string())?;
    let expressions = selector
        .requirements()
        .iter()
        .map(|r| LabelSelectorRequirement {
            key: r.key.clone(),
            operator: match r.operator {
                Operator::In => "In",
                Operator::NotIn => "NotIn",
                Operator::Exists => "Exists",
                Operator::DoesNotExist => "DoesNotExist",
            }
            .into(),
            values: matches!(r.operator, Operator::In | Operator::NotIn).then(|| r.values.clone()),
        })
        .collect();
    Ok(LabelSelector {
        match_expressions: Some(expressions),
        match_labels: None,
    })
}

struct Common {
    name: String,
    client_config: WebhookClientConfig,
    rules: Vec<RuleWithOperations>,
    failure_policy: String,
    namespace_selector: Option<LabelSelector>,
    match_conditions: Option<Vec<MatchCondition>>,
    timeout_seconds: i32,
}

fn common(
    plugin: &str,
    admission: &Admission,
    target: &Target,
    ca_bundle: Option<&[u8]>,
) -> Result<Common, String> {
    let path = format!("{}{plugin}", super::PATH);
    let client_config = WebhookClientConfig {
        ca_bundle: ca_bundle.map(|b| ByteString(b.to_vec())),
        service: match target {
            Target::Service {
                namespace,
                name,
                port,
            } => Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(path.clone()),
                port: Some(i32::from(*port)),
            }),
            Target::Url(_) => None,
        },
        url: match target {
            Target::Url(base) => Some(format!("{}{path}", base.trim_end_matches('/'))),
            Target::Service { .. } => None,
        },
    };
    let rules = admission
        .rules
        .iter()
        .map(|rule| {
            let plural = plural(&rule.gvk);
            let mut resources = vec![plural.clone()];
            resources.extend(rule.subresources.iter().map(|s| format!("{plural}/{s}")));
            RuleWithOperations {
                api_groups: Some(vec![rule.gvk.group.clone()]),
                api_versions: Some(vec![rule.gvk.version.clone()]),
                operations: Some(
                    rule.operations
                        .iter()
                        .map(|o| o.as_str().to_owned())
                        .collect(),
                ),
                resources: Some(resources),
                scope: Some("*".into()),
            }
        })
        .collect();
    let mut namespace_selector = admission
        .namespace_selector
        .as_deref()
        .map(label_selector)
        .transpose()
        .map_err(|e| format!("plugin {plugin}: namespaceSelector: {e}"))?;
    // kube-system stays out (a failing webhook must not stop the control plane's own
    // objects), unless the plugin's selector says which namespaces by name.
    if !admission
        .namespace_selector
        .as_deref()
        .is_some_and(|s| s.contains(NAMESPACE_NAME))
    {
        namespace_selector
            .get_or_insert_with(LabelSelector::default)
            .match_expressions
            .get_or_insert_with(Vec::new)
            .push(LabelSelectorRequirement {
                key: NAMESPACE_NAME.into(),
                operator: "NotIn".into(),
                values: Some(vec!["kube-system".into()]),
            });
    }
    let match_conditions = (!admission.match_conditions.is_empty()).then(|| {
        admission
            .match_conditions
            .iter()
            .map(|(name, expression)| MatchCondition {
                name: name.clone(),
                expression: expression.clone(),
            })
            .collect()
    });
    Ok(Common {
        name: webhook_name(plugin),
        client_config,
        rules,
        failure_policy: if admission.fail_open {
            "Ignore"
        } else {
            "Fail"
        }
        .into(),
        namespace_selector,
        match_conditions,
        timeout_seconds: i32::try_from(admission.timeout.as_secs()).unwrap_or(30),
    })
}

/// The configurations for `plugins` (name and declaration), named `name`: a validating one
/// when any plugin validates, a mutating one when any mutates, as YAML documents.
pub fn render(
    name: &str,
    plugins: &[(String, Admission)],
    target: &Target,
    ca_bundle: Option<&[u8]>,
) -> Result<String, String> {
    let meta = ObjectMeta {
        name: Some(name.to_owned()),
        ..ObjectMeta::default()
    };
    let mut validating = Vec::new();
    let mut mutating = Vec::new();
    for (plugin, admission) in plugins {
        let c = common(plugin, admission, target, ca_bundle)?;
        if admission.mutating {
            mutating.push(MutatingWebhook {
                admission_review_versions: vec!["v1".into()],
                client_config: c.client_config,
                failure_policy: Some(c.failure_policy),
                match_conditions: c.match_conditions,
                match_policy: Some("Equivalent".into()),
                name: c.name,
                namespace_selector: c.namespace_selector,
                object_selector: None,
                reinvocation_policy: Some("Never".into()),
                rules: Some(c.rules),
                side_effects: "None".into(),
                timeout_seconds: Some(c.timeout_seconds),
            });
        } else {
            validating.push(ValidatingWebhook {
                admission_review_versions: vec!["v1".into()],
                client_config: c.client_config,
                failure_policy: Some(c.failure_policy),
                match_conditions: c.match_conditions,
                match_policy: Some("Equivalent".into()),
                name: c.name,
                namespace_selector: c.namespace_selector,
                object_selector: None,
                rules: Some(c.rules),
                side_effects: "None".into(),
                timeout_seconds: Some(c.timeout_seconds),
            });
        }
    }
    let mut documents = Vec::new();
    if !validating.is_empty() {
        documents.push(document(&ValidatingWebhookConfiguration {
            metadata: meta.clone(),
            webhooks: Some(validating),
        }));
    }
    if !mutating.is_empty() {
        documents.push(document(&MutatingWebhookConfiguration {
            metadata: meta,
            webhooks: Some(mutating),
        }));
    }
    Ok(documents.join("---\n"))
}

/// One object as a YAML document, with its apiVersion and kind.
fn document<T: k8s_openapi::Resource + serde::Serialize>(object: &T) -> String {
    let mut value = serde_json::to_value(object).unwrap_or_default();
    value["apiVersion"] = T::API_VERSION.into();
    value["kind"] = T::KIND.into();
    serde_saphyr::to_string(&value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gvk::Gvk;
    use crate::plugins::manifest::{AdmissionRule, Operation};
    use std::time::Duration;

    fn admission(mutating: bool) -> Admission {
        Admission {
            mutating,
            rules: vec![AdmissionRule {
                gvk: Gvk::new("apps", "v1", "Deployment"),
                operations: vec![Operation::Create, Operation::Update],
                subresources: vec!["scale".into()],
            }],
            fail_open: mutating,
            timeout: Duration::from_secs(5),
            namespace_selector: Some("team in (a,b),!skip".into()),
            match_conditions: vec![(
                "not-system".into(),
                "!request.userInfo.username.startsWith('system:')".into(),
            )],
        }
    }

    #[test]
    fn each_plugin_gets_a_webhook_of_its_kind_with_its_rules() {
        let yaml = render(
            "kubewasm",
            &[
                ("image-policy".into(), admission(false)),
                ("defaults".into(), admission(true)),
            ],
            &Target::Service {
                namespace: "kubewasm".into(),
                name: "kubewasm-webhooks".into(),
                port: 443,
            },
            Some(b"PEM"),
        )
        .expect("renders");
        let docs: Vec<serde_json::Value> = yaml
            .split("---\n")
            .map(|d| serde_saphyr::from_str(d).expect("yaml"))
            .collect();
        assert_eq!(docs.len(), 2, "{yaml}");
        let validating = &docs[0]["webhooks"][0];
        assert_eq!(docs[0]["kind"], "ValidatingWebhookConfiguration");
        assert_eq!(validating["name"], "image-policy.kubewasm.dev");
        assert_eq!(validating["failurePolicy"], "Fail");
        assert_eq!(validating["timeoutSeconds"], 5);
        assert_eq!(
            validating["clientConfig"]["service"]["path"],
            "/admit/image-policy"
        );
        assert_eq!(
            validating["rules"][0]["resources"],
            serde_json::json!(["deployments", "deployments/scale"])
        );
        assert_eq!(
            validating["namespaceSelector"]["matchExpressions"][1],
            serde_json::json!({"key": "skip", "operator": "DoesNotExist"})
        );
        assert_eq!(
            validating["namespaceSelector"]["matchExpressions"][2],
            serde_json::json!({"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}),
            "kube-system left out"
        );
        assert_eq!(validating["matchConditions"][0]["name"], "not-system");
        let mutating = &docs[1]["webhooks"][0];
        assert_eq!(docs[1]["kind"], "MutatingWebhookConfiguration");
        assert_eq!(mutating["failurePolicy"], "Ignore");
        assert_eq!(mutating["sideEffects"], "None");
    }

    #[test]
    fn a_url_target_names_each_plugins_path() {
        let yaml = render(
            "kw",
            &[("p".into(), admission(false))],
            &Target::Url("https://127.0.0.1:8443/".into()),
            None,
        )
        .expect("renders");
        assert!(
            yaml.contains("url: https://127.0.0.1:8443/admit/p"),
            "{yaml}"
        );
    }

    #[test]
    fn kube_system_is_left_out_unless_the_selector_names_namespaces() {
        let selector = |namespace_selector: Option<&str>| {
            let mut a = admission(false);
            a.namespace_selector = namespace_selector.map(str::to_owned);
            let target = Target::Url("https://127.0.0.1:8443".into());
            let c = common("p", &a, &target, None).expect("renders");
            serde_json::to_value(c.namespace_selector).expect("json")
        };
        assert_eq!(
            selector(None),
            serde_json::json!({"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]})
        );
        assert_eq!(
            selector(Some("kubernetes.io/metadata.name in (kube-system)")),
            serde_json::json!({"matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["kube-system"]}]})
        );
    }
}
