//! Logs pod phase transitions (Pending, Running, Succeeded, Failed) from old and new states.

use kubewasm_sdk::{
    Event, Gvk, HandleError, Manifest, Object, Plugin, Subscription, export_plugin, log,
};

/// The pod's phase, read in the host: the pod is never copied into the plugin.
fn phase(object: &Object) -> Result<String, HandleError> {
    Ok(object
        .text("/status/phase")?
        .unwrap_or_else(|| "Unknown".into()))
}

struct PodPhase;

impl Plugin for PodPhase {
    fn describe() -> Manifest {
        // It reads the phase only: the host keeps no more of each pod for it.
        Manifest::new().subscribe(Subscription::to(Gvk::pod()).fields(&["/status/phase"]))
    }

    fn handle(event: Event<'_>) -> Result<(), HandleError> {
        match &event {
            Event::Added(added) => {
                let key = added.object.key();
                let phase = phase(added.object)?;
                let initial = if added.initial { "true" } else { "false" };
                log::info(
                    "pod seen",
                    &[("pod", &key), ("phase", &phase), ("initial", initial)],
                );
            }
            Event::Updated(updated) => {
                let (from, to) = (phase(updated.old)?, phase(updated.new)?);
                if from != to {
                    let key = updated.new.key();
                    log::info(
                        "pod phase changed",
                        &[("pod", &key), ("from", &from), ("to", &to)],
                    );
                }
            }
            Event::Deleted(deleted) => {
                let key = deleted.object.key();
                let phase = phase(deleted.object)?;
                let stale = if deleted.stale { "true" } else { "false" };
                log::info(
                    "pod deleted",
                    &[("pod", &key), ("last-phase", &phase), ("stale", stale)],
                );
            }
            Event::Sync(_) | Event::Requeue(_) => {}
        }
        Ok(())
    }
}

export_plugin!(PodPhase);
