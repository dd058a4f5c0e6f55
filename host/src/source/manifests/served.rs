//! The kinds each built-in API version has: every `(apiVersion, kind)` that some release from
//! Kubernetes 1.33 to 1.37 serves, alpha and beta versions included (whether a server turns
//! those on is its configuration), as k8s-openapi 0.29 lists them; discovery documents and
//! `Status` left out. A kind of a built-in group not listed here is one no API server serves:
//! kubectl answers "no matches for kind" for it.

/// Every served kind of each built-in API version, versions sorted.
pub const SERVED: &[(&str, &[&str])] = &[
    (
        "v1",
        &[
            "Binding",
            "ComponentStatus",
            "ConfigMap",
            "Endpoints",
            "Event",
            "LimitRange",
            "Namespace",
            "Node",
            "PersistentVolume",
            "PersistentVolumeClaim",
            "Pod",
            "PodTemplate",
            "ReplicationController",
            "ResourceQuota",
            "Secret",
            "Service",
            "ServiceAccount",
        ],
    ),
    (
        "admissionregistration.k8s.io/v1",
        &[
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "MutatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "ValidatingWebhookConfiguration",
        ],
    ),
    (
        "admissionregistration.k8s.io/v1alpha1",
        &["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"],
    ),
    (
        "admissionregistration.k8s.io/v1beta1",
        &[
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        ],
    ),
    ("apiextensions.k8s.io/v1", &["CustomResourceDefinition"]),
    ("apiregistration.k8s.io/v1", &["APIService"]),
    (
        "apps/v1",
        &[
            "ControllerRevision",
            "DaemonSet",
            "Deployment",
            "ReplicaSet",
            "StatefulSet",
        ],
    ),
    (
        "authentication.k8s.io/v1",
        &["SelfSubjectReview", "TokenRequest", "TokenReview"],
    ),
    (
        "authorization.k8s.io/v1",
        &[
            "LocalSubjectAccessReview",
            "SelfSubjectAccessReview",
            "SelfSubjectRulesReview",
            "SubjectAccessReview",
        ],
    ),
    ("autoscaling/v1", &["HorizontalPodAutoscaler", "Scale"]),
    ("autoscaling/v2", &["HorizontalPodAutoscaler"]),
    ("batch/v1", &["CronJob", "Job"]),
    (
        "certificates.k8s.io/v1",
        &[
            "CertificateSigningRequest",
            "ClusterTrustBundle",
            "PodCertificateRequest",
        ],
    ),
    (
        "certificates.k8s.io/v1alpha1",
        &["ClusterTrustBundle", "PodCertificateRequest"],
    ),
    (
        "certificates.k8s.io/v1beta1",
        &["ClusterTrustBundle", "PodCertificateRequest"],
    ),
    ("coordination.k8s.io/v1", &["Lease"]),
    ("coordination.k8s.io/v1alpha2", &["LeaseCandidate"]),
    ("coordination.k8s.io/v1beta1", &["LeaseCandidate"]),
    ("discovery.k8s.io/v1", &["EndpointSlice"]),
    ("events.k8s.io/v1", &["Event"]),
    (
        "flowcontrol.apiserver.k8s.io/v1",
        &["FlowSchema", "PriorityLevelConfiguration"],
    ),
    ("internal.apiserver.k8s.io/v1alpha1", &["StorageVersion"]),
    (
        "networking.k8s.io/v1",
        &[
            "IPAddress",
            "Ingress",
            "IngressClass",
            "NetworkPolicy",
            "ServiceCIDR",
        ],
    ),
    ("networking.k8s.io/v1beta1", &["IPAddress", "ServiceCIDR"]),
    ("node.k8s.io/v1", &["RuntimeClass"]),
    ("policy/v1", &["Eviction", "PodDisruptionBudget"]),
    (
        "rbac.authorization.k8s.io/v1",
        &["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"],
    ),
    (
        "resource.k8s.io/v1",
        &[
            "DeviceClass",
            "DeviceTaintRule",
            "ResourceClaim",
            "ResourceClaimTemplate",
            "ResourceSlice",
        ],
    ),
    (
        "resource.k8s.io/v1alpha3",
        &[
            "DeviceClass",
            "DeviceTaintRule",
            "ResourceClaim",
            "ResourceClaimTemplate",
            "ResourcePoolStatusRequest",
            "ResourceSlice",
        ],
    ),
    (
        "resource.k8s.io/v1beta1",
        &[
            "DeviceClass",
            "ResourceClaim",
            "ResourceClaimTemplate",
            "ResourceSlice",
        ],
    ),
    (
        "resource.k8s.io/v1beta2",
        &[
            "DeviceClass",
            "DeviceTaintRule",
            "ResourceClaim",
            "ResourceClaimTemplate",
            "ResourceSlice",
        ],
    ),
    ("scheduling.k8s.io/v1", &["PriorityClass"]),
    ("scheduling.k8s.io/v1alpha1", &["Workload"]),
    ("scheduling.k8s.io/v1alpha2", &["PodGroup", "Workload"]),
    (
        "scheduling.k8s.io/v1alpha3",
        &["CompositePodGroup", "PodGroup", "Workload"],
    ),
    ("scheduling.k8s.io/v1beta1", &["PodGroup", "Workload"]),
    (
        "storage.k8s.io/v1",
        &[
            "CSIDriver",
            "CSINode",
            "CSIStorageCapacity",
            "StorageClass",
            "VolumeAttachment",
            "VolumeAttributesClass",
        ],
    ),
    ("storage.k8s.io/v1alpha1", &["VolumeAttributesClass"]),
    ("storage.k8s.io/v1beta1", &["VolumeAttributesClass"]),
    ("storagemigration.k8s.io/v1", &["StorageVersionMigration"]),
    (
        "storagemigration.k8s.io/v1alpha1",
        &["StorageVersionMigration"],
    ),
    (
        "storagemigration.k8s.io/v1beta1",
        &["StorageVersionMigration"],
    ),
];
