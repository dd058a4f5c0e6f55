//! Records a Warning Event (events.k8s.io/v1) when a container of a pod goes into
//! CrashLoopBackOff. Repeats of the same Event within six minutes raise its series count
//! instead of creating new Events (the host aggregates like client-go's recorder).

use kubewasm_sdk::{
    Event, Gvk, HandleError, Manifest, Object, Plugin, Subscription, cluster, export_plugin, log,
};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ContainerStatus {
    name: String,
    #[serde(default)]
    restart_count: u32,
    #[serde(default)]
    state: Option<State>,
}

#[derive(Deserialize)]
struct State {
    waiting: Option<Waiting>,
}

#[derive(Deserialize)]
struct Waiting {
    reason: Option<String>,
}

/// The containers of `pod` waiting in CrashLoopBackOff, with their restart counts.
fn crash_looping(pod: &Object) -> Result<Vec<(String, u32)>, HandleError> {
    let Some(statuses) = pod.field("/status/containerStatuses")? else {
        return Ok(Vec::new());
    };
    let statuses: Vec<ContainerStatus> = statuses
        .parse()
        .map_err(|e| HandleError::fatal(format!("containerStatuses: {e}")))?;
    Ok(statuses
        .into_iter()
        .filter(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.waiting.as_ref())
                .and_then(|w| w.reason.as_deref())
                == Some("CrashLoopBackOff")
        })
        .map(|c| (c.name, c.restart_count))
        .collect())
}

struct CrashloopEvents;

impl Plugin for CrashloopEvents {
    fn describe() -> Manifest {
        Manifest::new().subscribe(Subscription::to(Gvk::pod()))
    }

    fn handle(event: Event<'_>) -> Result<(), HandleError> {
        let (pod, before) = match &event {
            Event::Added(a) => (a.object, Vec::new()),
            Event::Updated(u) => (u.new, crash_looping(u.old)?),
            Event::Deleted(_) | Event::Sync(_) | Event::Requeue(_) => return Ok(()),
        };
        let key = pod.key();
        for (container, restarts) in crash_looping(pod)? {
            if before.iter().any(|(name, _)| *name == container) {
                continue;
            }
            // The same note each time, so repeats fold into one Event's series.
            let note = format!("container {container} of pod {key} is restarting in a loop");
            cluster::record_event(pod, cluster::EventType::Warning, "CrashLoopBackOff", &note)?;
            log::info(
                "crash loop",
                &[
                    ("pod", &key),
                    ("container", &container),
                    ("restarts", &restarts.to_string()),
                ],
            );
        }
        Ok(())
    }
}

export_plugin!(CrashloopEvents);
