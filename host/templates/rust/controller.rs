//! {{name}}: a kubewasm controller. For every Namespace labelled `team`, keeps a ResourceQuota
//! `team-quota` in it. The host makes the Namespace its controller and deletes it when a
//! reconcile no longer applies it (the label went).

use kubewasm_sdk::cluster::{self, Target};
use kubewasm_sdk::{Controller, Gvk, HandleError, Manifest, ObjectKey, Plugin, cache, export_plugin};

fn quota() -> Gvk {
    Gvk::new("", "v1", "ResourceQuota")
}

struct Handler;

impl Plugin for Handler {
    fn describe() -> Manifest {
        // `reconcile` is called per Namespace, once per burst of events on it or its quotas.
        // More: `.with_finalizer()` and `finalize`, `watches_by_label` (docs/guides/rust.md).
        Manifest::new().controller(Controller::of(Gvk::namespace()).owns(quota()))
    }

    fn reconcile(key: ObjectKey) -> Result<(), HandleError> {
        // The object is read from the cache: gone is an answer, not an error.
        let Some(namespace) = cache::get(&Gvk::namespace(), None, &key.name)? else {
            return Ok(());
        };
        if namespace.label("team").is_none() {
            // Nothing applied: the host deletes the quota an earlier reconcile applied.
            return Ok(());
        }
        let target = Target {
            gvk: quota(),
            namespace: Some(key.name.clone()),
            name: "team-quota".into(),
            subresource: None,
        };
        // Server-side apply of the fields this plugin owns; a write that changes nothing is
        // not sent. A status: `kubewasm_sdk::status::Status` writes it only when it changed.
        cluster::apply(
            &target,
            r#"{"metadata": {"name": "team-quota"}, "spec": {"hard": {"pods": "20"}}}"#,
        )?;
        Ok(())
    }
}

export_plugin!(Handler);
