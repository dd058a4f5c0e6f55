//! On Pod events, log the pod's owner chain (Pod -> ReplicaSet -> Deployment) and how many pods
//! its ReplicaSet has: the Rust twin of plugins/python/owner-chain and
//! plugins/javascript/owner-chain, so the three languages can be compared on the same work.

use std::sync::LazyLock;

use kubewasm_sdk::{
    Event, Gvk, HandleError, Manifest, Plugin, Subscription, cache, export_plugin, log,
};

// Built once, like the Python and JavaScript twins' module constants: a `Gvk` holds its
// strings, so building one per event costs allocations in the handler.
static POD: LazyLock<Gvk> = LazyLock::new(Gvk::pod);
static REPLICA_SET: LazyLock<Gvk> = LazyLock::new(Gvk::replica_set);
static DEPLOYMENT: LazyLock<Gvk> = LazyLock::new(Gvk::deployment);

struct OwnerChain;

impl Plugin for OwnerChain {
    fn describe() -> Manifest {
        Manifest::new()
            .subscribe(Subscription::to(Gvk::pod()))
            .query(Gvk::replica_set())
            .query(Gvk::deployment())
    }

    fn handle(event: Event<'_>) -> Result<(), HandleError> {
        let pod = match &event {
            Event::Added(a) => a.object,
            Event::Updated(u) => u.new,
            _ => return Ok(()),
        };
        let key = pod.key();
        // The controller of each type, from the cache, uid checked: one call into the host.
        let Some(rs) = pod.owner(&REPLICA_SET)? else {
            log::info(
                "owner chain",
                &[
                    ("pod", &key),
                    ("replicaset", "-"),
                    ("deployment", "-"),
                    ("siblings", "0"),
                ],
            );
            return Ok(());
        };
        let deployment = rs.owner(&DEPLOYMENT)?;
        // A count needs no objects: the keys of the ReplicaSet's pods, no handles.
        let siblings = cache::index_keys(&POD, kubewasm_sdk::index::OWNER_UID, &rs.uid())?
            .len()
            .to_string();
        let deployment = deployment.map_or_else(|| "-".to_owned(), |d| d.name());
        log::info(
            "owner chain",
            &[
                ("pod", &key),
                ("replicaset", &rs.name()),
                ("deployment", &deployment),
                ("siblings", &siblings),
            ],
        );
        Ok(())
    }
}

export_plugin!(OwnerChain);
