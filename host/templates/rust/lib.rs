//! {{name}}: a kubewasm plugin. Logs each pod labelled app=web with its phase.

use kubewasm_sdk::{Event, Gvk, HandleError, Manifest, Plugin, Subscription, export_plugin, log};

struct Handler;

impl Plugin for Handler {
    fn describe() -> Manifest {
        // Only pods labelled app=web; the host filters in memory.
        Manifest::new().subscribe(Subscription::to(Gvk::pod()).selector("app=web"))
    }

    fn handle(event: Event<'_>) -> Result<(), HandleError> {
        if let Event::Deleted(_) = event {
            return Ok(());
        }
        // The pod is a handle to the host's cached object: read what you need from it. A
        // failed read (`?`) becomes a handle error the host retries or gives up.
        let pod = event.object();
        let phase = pod.text("/status/phase")?.unwrap_or_else(|| "-".into());
        log::info("web pod", &[("pod", &pod.key()), ("phase", &phase)]);
        Ok(())
    }
}

export_plugin!(Handler);
