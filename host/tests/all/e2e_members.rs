//! Members of a group through their Leases on a real kube-apiserver (kubewasm-testenv): three
//! members see each other and the slices each says it delivers; one stopping is gone for the
//! others at once (its Lease deleted), one killed is gone once its Lease has not changed for
//! the lease duration; a member cut off by a hung API server counts itself out (it must then
//! deliver nothing) before the others see it gone.

use std::time::{Duration, Instant};

use kubewasm::members::Claim;
use kubewasm::members::{MembersConfig, Membership, View};
use kubewasm::shard::{Cuts, Slices, Table, fnv1a64};
use kubewasm_testenv::TestEnv;
use tokio::sync::{oneshot, watch};

const WAIT: Duration = Duration::from_secs(30);
const LEASE: Duration = Duration::from_secs(3);

struct Member {
    view: watch::Receiver<View>,
    claims: watch::Sender<Claim>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

fn config(identity: &str) -> MembersConfig {
    MembersConfig {
        lease_duration: LEASE,
        renew_deadline: Duration::from_secs(2),
        retry: Duration::from_millis(250),
        ..MembersConfig::new("default", "kubewasm", identity)
    }
}

fn start(client: &kube::Client, identity: &str) -> Member {
    let (claims, slices) = watch::channel(Claim::default());
    let (view_tx, view) = watch::channel(View::default());
    let (stop, stopped) = oneshot::channel::<()>();
    let membership = Membership::new(client.clone(), config(identity), slices);
    let task = tokio::spawn(membership.run(view_tx, stopped));
    Member {
        view,
        claims,
        stop: Some(stop),
        task,
    }
}

/// Waits until `member`'s view satisfies `check`; the time it took.
async fn until(member: &Member, what: &str, check: impl Fn(&View) -> bool) -> Duration {
    let started = Instant::now();
    loop {
        if check(&member.view.borrow()) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < WAIT,
            "{what}: {:?}",
            *member.view.borrow()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn names(view: &View) -> Vec<&str> {
    view.members.keys().map(String::as_str).collect()
}

/// A pod name in capitals (or with characters a Lease name cannot hold) still joins, and
/// beside the same name in lower case each keeps a Lease of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identities_no_lease_name_could_hold_as_they_are_still_join() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let client = env.client().await?;
    let members: Vec<Member> = ["Web-0", "web-0", "web_1"]
        .iter()
        .map(|m| start(&client, m))
        .collect();
    for m in &members {
        until(m, "all three joined and seen", |v| {
            v.renewed && v.joined && names(v) == ["Web-0", "web-0", "web_1"]
        })
        .await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_see_each_other_and_notice_one_leaving_or_dying() -> anyhow::Result<()> {
    let env = TestEnv::start().await?;
    let client = env.client().await?;
    let mut members: Vec<Member> = ["a", "b", "c"].iter().map(|m| start(&client, m)).collect();
    for m in &members {
        until(m, "all three seen", |v| {
            v.renewed && names(v) == ["a", "b", "c"]
        })
        .await;
    }
    // What a member claims, and the cut table it is under, reach the others through its
    // Lease.
    let table = Table {
        generation: 2,
        cuts: Cuts::balanced(&[fnv1a64("team-a"), fnv1a64("team-b")]),
    };
    members[0]
        .claims
        .send((Slices::range(0..8), table))
        .expect("a's membership runs");
    until(&members[1], "a's slices and table seen by b", |v| {
        v.members.get("a") == Some(&Slices::range(0..8)) && v.tables.get("a") == Some(&table)
    })
    .await;
    assert_eq!(
        members[1].view.borrow().tables.get("c"),
        Some(&Table::default()),
        "c claims under equal cuts"
    );

    // c stops: its Lease is deleted, and the others see two members within a few rounds.
    let mut c = members.pop().expect("c");
    let _ = c.stop.take().expect("running").send(());
    c.task.await?;
    assert!(
        !c.view.borrow().renewed,
        "a stopped member delivers nothing"
    );
    for m in &members {
        let took = until(m, "c gone", |v| names(v) == ["a", "b"]).await;
        assert!(took < LEASE, "a deleted Lease needs no expiry: {took:?}");
    }

    // b dies (its task aborted, its Lease left behind): a sees it gone once the Lease has
    // not changed for the lease duration, and not before.
    let b = members.pop().expect("b");
    b.task.abort();
    let died = Instant::now();
    until(&members[0], "b gone", |v| names(v) == ["a"]).await;
    let took = died.elapsed();
    assert!(
        took >= LEASE - Duration::from_millis(250) && took < LEASE + Duration::from_secs(3),
        "b expired after {took:?} (lease {LEASE:?})"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cut_off_by_a_hung_api_server_counts_itself_out_before_the_others_do()
-> anyhow::Result<()> {
    // a reaches the API server through a proxy that then holds every byte: its renewals get
    // no answer. Its own view must say it is not renewed (so it delivers nothing) before b,
    // reaching the server directly, sees it gone and takes its slices.
    let env = TestEnv::start().await?;
    let client = env.client().await?;
    let proxy = kubewasm_testenv::proxy::FreezableProxy::start(env.addr()).await?;
    let through_proxy = env.admin_client_via(proxy.addr()).await?;
    let a = start(&through_proxy, "a");
    let b = start(&client, "b");
    for m in [&a, &b] {
        until(m, "both seen", |v| v.renewed && names(v) == ["a", "b"]).await;
    }
    proxy.freeze(true);
    let frozen = Instant::now();
    // Both measured from the freeze; b is still seeing a when a counts itself out.
    until(&a, "a counts itself out", |v| !v.renewed).await;
    let a_out = frozen.elapsed();
    assert_eq!(names(&b.view.borrow()), ["a", "b"], "b saw a gone first");
    until(&b, "b sees a gone", |v| names(v) == ["b"]).await;
    let b_sees = frozen.elapsed();
    assert!(
        a_out < b_sees,
        "a counted itself out {a_out:?} after the freeze, b saw it gone {b_sees:?} after"
    );
    // Its renew deadline (2 s) after its last renewal, which was at most a round before.
    assert!(
        a_out < Duration::from_secs(2) + Duration::from_secs(1),
        "a counted itself out {a_out:?} after the freeze"
    );
    Ok(())
}
