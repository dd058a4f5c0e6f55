//! Realistic objects for benchmarks: pods of a chosen JSON size with managedFields as a real
//! API server sends them, deployments, configmaps, and recorded watch streams.
//!
//! Everything is deterministic (a function of the index), so every consumer of a run (our
//! pipeline, kube-rs, client-go) sees byte-identical input.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use serde_json::{Map, Value, json};

/// A pod named `pod-{i}` in namespace `bench-{i % 10}` whose JSON is about `target` bytes, at
/// resourceVersion `rv`. From 4 KB up it is a full pod as a controller and kubelet leave it
/// (probes aside); below, a lean one (one container, no volumes, phase only), both with
/// managedFields.
pub fn pod(i: usize, target: usize, rv: u64) -> Value {
    let name = format!("pod-{i}");
    let namespace = format!("bench-{}", i % 10);
    // Five replicas per ReplicaSet: they share its pod-template-hash and owner uid.
    let hash = format!(
        "{:08x}",
        ((i / 5) as u64).wrapping_mul(0x9e37_79b9) & 0xffff_ffff
    );
    let (variables, notes) = shape(target);
    let env: Vec<Value> = (0..variables)
        .map(|n| {
            json!({"name": format!("SETTING_{n:04}"),
                   "value": format!("value-{name}-{n:06}")})
        })
        .collect();
    let mut pod = build_pod(&name, &namespace, &hash, i, rv, &env);
    if target < 4096 {
        lean(&mut pod);
        for n in 0..notes {
            pod["metadata"]["annotations"][format!("example.com/note-{n}")] = json!("x".repeat(16));
        }
    }
    pod
}

/// Environment variables (full pods) or annotations (lean pods) that bring pod 0 to `target`
/// bytes; computed once per size.
fn shape(target: usize) -> (usize, usize) {
    static SHAPES: Mutex<BTreeMap<usize, (usize, usize)>> = Mutex::new(BTreeMap::new());
    let mut shapes = SHAPES.lock().unwrap_or_else(PoisonError::into_inner);
    *shapes.entry(target).or_insert_with(|| {
        let size = |pod: &Value| pod.to_string().len();
        if target < 4096 {
            let mut pod = build_pod("pod-0", "bench-0", "00000000", 0, 1, &[]);
            lean(&mut pod);
            let mut notes = 0;
            while size(&pod) < target {
                pod["metadata"]["annotations"][format!("example.com/note-{notes}")] =
                    json!("x".repeat(16));
                notes += 1;
            }
            (0, notes)
        } else {
            let mut env = Vec::new();
            while size(&build_pod("pod-0", "bench-0", "00000000", 0, 1, &env)) < target {
                env.push(json!({"name": format!("SETTING_{:04}", env.len()),
                                "value": format!("value-pod-0-{:06}", env.len())}));
            }
            (env.len(), 0)
        }
    })
}

/// Strips a full pod down to a lean one.
fn lean(pod: &mut Value) {
    for (path, field) in [
        ("/spec", "volumes"),
        ("/spec", "tolerations"),
        ("/spec", "securityContext"),
        ("/spec/containers/0", "volumeMounts"),
        ("/spec/containers/0", "resources"),
        ("/spec/containers/0", "env"),
        ("/spec/containers/0", "terminationMessagePath"),
        ("/spec/containers/0", "terminationMessagePolicy"),
        ("/status", "conditions"),
        ("/status", "containerStatuses"),
        ("/status", "podIPs"),
        ("/metadata", "annotations"),
        ("/metadata", "generateName"),
    ] {
        if let Some(map) = pod.pointer_mut(path).and_then(Value::as_object_mut) {
            map.remove(field);
        }
    }
    pod["metadata"]["annotations"] = json!({});
    pod["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Update",
        "apiVersion": "v1", "time": "2026-11-20T10:00:00Z", "fieldsType": "FieldsV1",
        "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                     "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}]);
}

fn build_pod(name: &str, namespace: &str, hash: &str, i: usize, rv: u64, env: &[Value]) -> Value {
    let uid = format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        i,
        i % 0xffff,
        i % 0xfff,
        i % 0xfff,
        i
    );
    let env_fields: Map<String, Value> = env
        .iter()
        .map(|e| {
            (
                format!(
                    "k:{{\"name\":\"{}\"}}",
                    e["name"].as_str().unwrap_or_default()
                ),
                json!({".": {}, "f:name": {}, "f:value": {}}),
            )
        })
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": format!("web-{hash}-"),
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": rv.to_string(),
            "creationTimestamp": "2026-11-20T10:00:00Z",
            "labels": {"app": "web", "pod-template-hash": hash, "tier": "frontend",
                       "shard": format!("s{}", i % 16)},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-19T08:00:00Z"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "name": format!("web-{hash}"), "uid": format!("rs-{hash}"),
                "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-11-20T10:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {
                    "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {},
                        "f:pod-template-hash": {}, "f:tier": {}, "f:shard": {}},
                        "f:ownerReferences": {".": {}, format!("k:{{\"uid\":\"rs-{hash}\"}}"): {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {".": {}, "f:env": env_fields,
                        "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                        "f:ports": {".": {}, "k:{\"containerPort\":8080,\"protocol\":\"TCP\"}": {
                            ".": {}, "f:containerPort": {}, "f:name": {}, "f:protocol": {}}},
                        "f:resources": {".": {}, "f:limits": {".": {}, "f:memory": {}},
                            "f:requests": {".": {}, "f:cpu": {}, "f:memory": {}}},
                        "f:terminationMessagePath": {}, "f:terminationMessagePolicy": {}}},
                        "f:dnsPolicy": {}, "f:enableServiceLinks": {}, "f:restartPolicy": {},
                        "f:schedulerName": {}, "f:securityContext": {},
                        "f:terminationGracePeriodSeconds": {}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-11-20T10:00:05Z", "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:conditions": {
                    "k:{\"type\":\"ContainersReady\"}": {".": {}, "f:lastProbeTime": {},
                        "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
                    "k:{\"type\":\"Initialized\"}": {".": {}, "f:lastProbeTime": {},
                        "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}},
                    "k:{\"type\":\"Ready\"}": {".": {}, "f:lastProbeTime": {},
                        "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}},
                    "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {},
                    "f:podIPs": {".": {}, "k:{\"ip\":\"10.244.1.7\"}": {".": {}, "f:ip": {}}},
                    "f:startTime": {}}}}
            ]
        },
        "spec": {
            "containers": [{
                "name": "web",
                "image": "registry.example.com/shop/web:1.42.0",
                "imagePullPolicy": "IfNotPresent",
                "env": env,
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "resources": {"limits": {"memory": "256Mi"},
                              "requests": {"cpu": "100m", "memory": "128Mi"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "volumeMounts": [{"name": "kube-api-access", "readOnly": true,
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}]
            }],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": format!("node-{}", i % 50),
            "securityContext": {},
            "schedulerName": "default-scheduler",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                 "effect": "NoExecute", "tolerationSeconds": 300}],
            "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}]
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastProbeTime": null,
                 "lastTransitionTime": "2026-11-20T10:00:01Z"},
                {"type": "Ready", "status": "True", "lastProbeTime": null,
                 "lastTransitionTime": "2026-11-20T10:00:05Z"},
                {"type": "ContainersReady", "status": "True", "lastProbeTime": null,
                 "lastTransitionTime": "2026-11-20T10:00:05Z"}],
            "hostIP": "192.168.1.10",
            "podIP": "10.244.1.7",
            "podIPs": [{"ip": "10.244.1.7"}],
            "startTime": "2026-11-20T10:00:01Z",
            "containerStatuses": [{"name": "web", "ready": true, "restartCount": 0,
                "image": "registry.example.com/shop/web:1.42.0",
                "imageID": "registry.example.com/shop/web@sha256:4f1c2b1d6c1f0e0a9b8d7c6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a",
                "containerID": format!("containerd://{:064x}", i),
                "started": true, "state": {"running": {"startedAt": "2026-11-20T10:00:04Z"}},
                "lastState": {}}]
        }
    })
}

/// A deployment named `web-{i}` at resourceVersion `rv`.
pub fn deployment(i: usize, rv: u64) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": format!("web-{i}"), "namespace": format!("bench-{}", i % 10),
                     "uid": format!("dep-{i:08}"), "resourceVersion": rv.to_string(),
                     "labels": {"app": "web"}, "annotations": {"deployment.kubernetes.io/revision": "3"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "registry.example.com/shop/web:1.42.0"}]}}},
        "status": {"replicas": 3, "readyReplicas": 3, "updatedReplicas": 3, "availableReplicas": 3}
    })
}

/// A configmap named `cm-{i}` with `keys` entries, at resourceVersion `rv`.
pub fn config_map(i: usize, keys: usize, rv: u64) -> Value {
    let data: Map<String, Value> = (0..keys)
        .map(|k| {
            (
                format!("key-{k}"),
                json!(format!("value {k} of configmap {i}")),
            )
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i}"), "namespace": format!("bench-{}", i % 10),
                     "uid": format!("cm-{i:08}"), "resourceVersion": rv.to_string()},
        "data": data
    })
}

/// One event of a recorded watch stream.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// ADDED, MODIFIED or DELETED.
    pub kind: &'static str,
    /// The object as the event carries it.
    pub object: Value,
}

impl Recorded {
    /// The event as one line of a watch response.
    pub fn line(&self) -> String {
        json!({"type": self.kind, "object": self.object}).to_string()
    }
}

/// What each update of a recorded stream changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// An annotation: metadata only.
    Annotation,
    /// The status only (a container's restart count, or a message on a lean pod), the usual
    /// update on a real cluster.
    Status,
}

/// A watch stream over `objects` pods of `size` bytes: each pod added, then `updates` rounds
/// of one modification per pod (of what `update` says), then every pod deleted. Resource
/// versions count up from `first_rv`.
pub fn pod_stream(
    objects: usize,
    size: usize,
    updates: usize,
    update: Update,
    first_rv: u64,
) -> Vec<Recorded> {
    let mut rv = first_rv;
    let mut next = || {
        rv += 1;
        rv
    };
    let mut events = Vec::with_capacity(objects * (updates + 2));
    let base: Vec<Value> = (0..objects).map(|i| pod(i, size, 0)).collect();
    let at = |p: &Value, rv: u64| {
        let mut p = p.clone();
        p["metadata"]["resourceVersion"] = json!(rv.to_string());
        p
    };
    for p in &base {
        events.push(Recorded {
            kind: "ADDED",
            object: at(p, next()),
        });
    }
    for round in 0..updates {
        for p in &base {
            let mut changed = at(p, next());
            match update {
                Update::Annotation => {
                    changed["metadata"]["annotations"]["example.com/round"] =
                        json!((round + 1).to_string());
                }
                Update::Status => match changed.pointer_mut("/status/containerStatuses/0") {
                    Some(container) => container["restartCount"] = json!(round + 1),
                    None => changed["status"]["message"] = json!(format!("round {}", round + 1)),
                },
            }
            events.push(Recorded {
                kind: "MODIFIED",
                object: changed,
            });
        }
    }
    for p in &base {
        events.push(Recorded {
            kind: "DELETED",
            object: at(p, next()),
        });
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_have_the_asked_size_and_managed_fields() {
        for target in [1024, 4096, 16384] {
            let p = pod(7, target, 5);
            let size = p.to_string().len();
            assert!(size >= target && size < target + 700, "{target}: {size}");
            assert!(
                p["metadata"]["managedFields"]
                    .as_array()
                    .is_some_and(|m| !m.is_empty())
            );
            assert_eq!(pod(7, target, 5), p, "deterministic");
        }
    }

    #[test]
    fn streams_add_update_and_delete_every_object() {
        let s = pod_stream(3, 1024, 2, Update::Annotation, 100);
        let kinds: Vec<&str> = s.iter().map(|e| e.kind).collect();
        assert_eq!(kinds.len(), 3 * 4);
        assert_eq!(&kinds[..3], ["ADDED"; 3]);
        assert_eq!(&kinds[9..], ["DELETED"; 3]);
        assert_eq!(s[11].object["metadata"]["resourceVersion"], "112");
        assert!(s[0].line().starts_with(r#"{"object":"#) || s[0].line().starts_with(r#"{"type":"#));
    }

    #[test]
    fn status_updates_change_the_status_alone() {
        for size in [1024, 4096] {
            let s = pod_stream(2, size, 1, Update::Status, 100);
            let (added, updated) = (&s[0].object, &s[2].object);
            assert_eq!(added["spec"], updated["spec"], "{size}");
            assert_eq!(
                added["metadata"]["annotations"], updated["metadata"]["annotations"],
                "{size}"
            );
            assert_ne!(added["status"], updated["status"], "{size}");
        }
    }
}
