//! Replicas that split the work announce themselves through `coordination.k8s.io/v1` Leases,
//! one each (issue 60): a member renews its own Lease every `retry` period and lists the
//! group's; a Lease whose record has not changed for `lease_duration` by this replica's
//! clock is a member gone (as in leader election, clocks need not agree). Each Lease also
//! carries the slices its member claims and the cut table they are under, the fencing of
//! the hand-over ([`handover`], docs/design/sharding.md). A member that cannot renew for `renew_deadline` says so in its
//! view: it must stop delivering before the others may take its slices. On shutdown it
//! deletes its Lease, so the others take over at once.
//!
//! This knows nothing of informers or plugins: it keeps the Leases and publishes what it sees.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use tokio::sync::watch;

use crate::shard::{Slices, Table};

pub mod handover;

/// The label naming a member Lease's group.
pub const GROUP_LABEL: &str = "kubewasm.dev/members";

/// The annotation holding the slices a member claims (a 64-bit mask, hexadecimal): those it
/// delivers, and those it will deliver once no other member claims them ([`handover`]).
pub const CLAIMS: &str = "kubewasm.dev/claims";

/// The annotation holding the cut table a member's claims are under
/// ([`Table::to_text`]); absent, equal cuts (generation 0).
pub const CUTS: &str = "kubewasm.dev/cuts";

/// What a member writes into its Lease: the slices it claims and their cut table.
pub type Claim = (Slices, Table);

/// How long after a Lease's expiry a member looks again, so the Lease counts as expired.
const EXPIRY_MARGIN: Duration = Duration::from_millis(20);

/// Naming and timing of a group of members.
#[derive(Debug, Clone)]
pub struct MembersConfig {
    /// Namespace of the Leases.
    pub namespace: String,
    /// The group's name: the value of [`GROUP_LABEL`] on its Leases.
    pub group: String,
    /// This replica's identity (the pod name by default).
    pub identity: String,
    /// How long a Lease stays valid without renewal (15 s, as the leader's).
    pub lease_duration: Duration,
    /// How long a member keeps trying to renew before it counts itself out (10 s).
    pub renew_deadline: Duration,
    /// How often to renew and look (2 s).
    pub retry: Duration,
}

impl MembersConfig {
    /// The leader election's default timings for `identity` in `group`.
    pub fn new(namespace: &str, group: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            group: group.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }

    /// The name of `identity`'s Lease: `GROUP-member-IDENTITY` when that is a valid object
    /// name; else lowercased, other characters as dashes, cut to fit, with a hash of the
    /// identity, so that two identities that read alike (a pod name in capitals) still have
    /// Leases of their own.
    pub fn lease_name(&self, identity: &str) -> String {
        let name = format!("{}-member-{identity}", self.group);
        if is_object_name(&name) {
            return name;
        }
        use sha2::Digest;
        let digest = sha2::Sha256::digest(identity.as_bytes());
        let hash: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
        let cleaned: String = name
            .chars()
            .map(|c| match c {
                'a'..='z' | '0'..='9' | '-' | '.' => c,
                'A'..='Z' => c.to_ascii_lowercase(),
                _ => '-',
            })
            .take(MAX_OBJECT_NAME - hash.len() - 1)
            .collect();
        let cleaned = cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric());
        format!("{cleaned}-{hash}")
    }
}

/// Longest object name (a DNS subdomain).
const MAX_OBJECT_NAME: usize = 253;

/// Whether `name` is a valid name for a Lease (a DNS subdomain: lowercase letters, digits,
/// `-` and `.`, starting and ending with a letter or digit, at most 253 characters).
fn is_object_name(name: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    name.len() <= MAX_OBJECT_NAME
        && edge(name.chars().next())
        && edge(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
}

/// What a member sees of its group.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// The live members, by identity, with the slices each claims (as its Lease says).
    pub members: BTreeMap<String, Slices>,
    /// The cut table each live member's claims are under (as its Lease says; a member
    /// whose Lease names none readable is missing, and no table is agreed on).
    pub tables: BTreeMap<String, Table>,
    /// Whether this member's own Lease is current: when false it must deliver nothing.
    pub renewed: bool,
    /// Whether its own Lease was ever written (false: it never joined the group).
    pub joined: bool,
}

/// Why one round with the API server failed.
#[derive(Debug, thiserror::Error)]
enum MembersError {
    /// The API server refused or failed the request.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The API server did not answer in time.
    #[error("no answer from the API server within {0:?}")]
    NoAnswer(Duration),
}

/// One replica's membership: its Lease, and what it sees of the others.
pub struct Membership {
    api: Api<Lease>,
    config: MembersConfig,
    /// Each Lease's record (holder and renew time) as last seen, and when it last changed.
    observed: HashMap<String, (String, Instant)>,
    /// When this member's last successful renewal of its own Lease was sent.
    renewed: Option<Instant>,
    claims: watch::Receiver<Claim>,
    /// Told, at each renewal, until when the slices are this member's by its own clock.
    duty: Option<std::sync::Arc<crate::shard::Duty>>,
}

fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

impl Membership {
    /// A member using `client`; `claims` are the slices it claims and their table, written
    /// into its Lease at each renewal.
    pub fn new(
        client: kube::Client,
        config: MembersConfig,
        claims: watch::Receiver<Claim>,
    ) -> Self {
        Self {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: HashMap::new(),
            renewed: None,
            claims,
            duty: None,
        }
    }

    /// Confirms `duty`'s slices at each renewal, until the renew deadline from when it was
    /// sent: a member stopped past it delivers nothing when it resumes, before its task has
    /// noticed.
    pub fn confirming(mut self, duty: std::sync::Arc<crate::shard::Duty>) -> Self {
        self.duty = Some(duty);
        self
    }

    /// Renews its Lease and publishes what it sees into `view` every `retry` period, until
    /// `stop` resolves; then deletes its Lease.
    pub async fn run(mut self, view: watch::Sender<View>, stop: impl std::future::Future) {
        tokio::pin!(stop);
        loop {
            let deadline = self.config.renew_deadline;
            // A round that hangs past the renew deadline counts this member out at the
            // deadline itself, not when the round gives up.
            let mut expires = self
                .renewed
                .map(|at| tokio::time::Instant::from_std(at + deadline));
            let round = {
                let round = tokio::time::timeout(deadline, self.round());
                tokio::pin!(round);
                loop {
                    let at = expires.unwrap_or_else(tokio::time::Instant::now);
                    tokio::select! {
                        done = &mut round => break done.unwrap_or(Err(MembersError::NoAnswer(deadline))),
                        () = tokio::time::sleep_until(at), if expires.is_some() => {
                            expires = None;
                            view.send_if_modified(|v| std::mem::replace(&mut v.renewed, false));
                        }
                    }
                }
            };
            let seen = round
                .inspect_err(|e| tracing::warn!(group = %self.config.group, identity = %self.config.identity, "membership: {e}"))
                .ok();
            let renewed = self
                .renewed
                .is_some_and(|at| at.elapsed() < self.config.renew_deadline);
            view.send_if_modified(|v| {
                let (members, tables) =
                    seen.unwrap_or_else(|| (v.members.clone(), v.tables.clone()));
                let next = View {
                    members,
                    tables,
                    renewed,
                    joined: v.joined || renewed,
                };
                let changed = *v != next;
                *v = next;
                changed
            });
            tokio::select! {
                _ = &mut stop => break,
                _ = tokio::time::sleep(self.next_round()) => {}
                // A new claim goes out at once: a hand-over waits on it.
                Ok(()) = self.claims.changed() => {}
            }
        }
        let name = self.config.lease_name(&self.config.identity);
        let deleted = tokio::time::timeout(
            self.config.renew_deadline,
            self.api.delete(&name, &DeleteParams::default()),
        )
        .await;
        if !matches!(deleted, Ok(Ok(_))) {
            tracing::warn!(lease = %name, "membership Lease not deleted: the others take over when it expires");
        }
        view.send_modify(|v| v.renewed = false);
    }

    /// Time until the next round: the retry period, or sooner when a member's Lease expires
    /// before then, so its slices are taken over within the lease duration and one retry
    /// period of its last renewal, not a round later.
    fn next_round(&self) -> Duration {
        let now = Instant::now();
        self.observed
            .iter()
            .filter(|(holder, _)| **holder != self.config.identity)
            .map(|(_, (_, since))| *since + self.config.lease_duration)
            .filter(|expiry| *expiry > now)
            .map(|expiry| expiry - now + EXPIRY_MARGIN)
            .fold(self.config.retry, Duration::min)
    }

    /// Renews this member's Lease, then lists the group: the live members, their slices
    /// and their tables.
    #[allow(clippy::type_complexity)]
    async fn round(
        &mut self,
    ) -> Result<(BTreeMap<String, Slices>, BTreeMap<String, Table>), MembersError> {
        self.renew().await?;
        let selector = format!("{GROUP_LABEL}={}", self.config.group);
        let leases = self
            .api
            .list(&ListParams::default().labels(&selector))
            .await?;
        let mut live = BTreeMap::new();
        let mut tables = BTreeMap::new();
        let mut present = Vec::new();
        for lease in leases {
            let Some(spec) = &lease.spec else { continue };
            let Some(holder) = spec.holder_identity.clone() else {
                continue;
            };
            let record = spec
                .renew_time
                .as_ref()
                .map(|t| t.0.to_string())
                .unwrap_or_default();
            let since = match self.observed.get(&holder) {
                Some((seen, since)) if *seen == record => *since,
                _ => Instant::now(),
            };
            self.observed.insert(holder.clone(), (record, since));
            present.push(holder.clone());
            let own = holder == self.config.identity;
            if own || since.elapsed() <= self.config.lease_duration {
                let annotation = |key| lease.metadata.annotations.as_ref()?.get(key);
                let slices = annotation(CLAIMS)
                    .and_then(|bits| u64::from_str_radix(bits, 16).ok())
                    .map(Slices::from_bits)
                    .unwrap_or_default();
                // Absent: equal cuts. Unreadable: left out, so no table is agreed on and the
                // others deliver nothing rather than overlap it.
                let table = match annotation(CUTS) {
                    None => Some(Table::default()),
                    Some(text) => Table::from_text(text),
                };
                match table {
                    Some(table) => {
                        tables.insert(holder.clone(), table);
                    }
                    None => {
                        tracing::warn!(member = %holder, "membership Lease: unreadable {CUTS} annotation")
                    }
                }
                live.insert(holder, slices);
            }
        }
        self.observed.retain(|holder, _| present.contains(holder));
        Ok((live, tables))
    }

    /// Creates or renews this member's Lease, with the slices it claims.
    async fn renew(&mut self) -> Result<(), MembersError> {
        let sent = Instant::now();
        let name = self.config.lease_name(&self.config.identity);
        let duration = i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let (slices, table) = *self.claims.borrow_and_update();
        let claims = format!("{:016x}", slices.bits());
        let mut lease = match self.api.get_opt(&name).await? {
            Some(lease) => lease,
            None => Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: None,
            },
        };
        let exists = lease.metadata.resource_version.is_some();
        lease
            .metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(GROUP_LABEL.to_owned(), self.config.group.clone());
        lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .extend([
                (CLAIMS.to_owned(), claims),
                (CUTS.to_owned(), table.to_text()),
            ]);
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        spec.holder_identity = Some(self.config.identity.clone());
        spec.lease_duration_seconds = Some(duration);
        spec.renew_time = Some(now());
        if exists {
            // The resourceVersion makes this a compare-and-swap: a conflict is retried next
            // round.
            self.api
                .replace(&name, &PostParams::default(), &lease)
                .await?;
        } else {
            spec.acquire_time = Some(now());
            self.api.create(&PostParams::default(), &lease).await?;
        }
        self.renewed = Some(sent);
        if let Some(duty) = &self.duty {
            duty.confirm_slices_until(sent + self.config.renew_deadline);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_identity_gets_a_valid_lease_name_of_its_own() {
        let config = MembersConfig::new("ns", "kubewasm", "a");
        assert_eq!(config.lease_name("web-0-12"), "kubewasm-member-web-0-12");
        let upper = config.lease_name("Web-0-12");
        let lower = config.lease_name("web-0-12");
        assert!(is_object_name(&upper), "{upper}");
        assert_ne!(
            upper, lower,
            "identities that read alike keep Leases of their own"
        );
        assert!(upper.starts_with("kubewasm-member-web-0-12-"), "{upper}");
        for odd in ["Pod_Name:1", "-", "ü", &"x".repeat(400)] {
            let name = config.lease_name(odd);
            assert!(is_object_name(&name), "{odd:?} gave {name:?}");
        }
    }

    #[tokio::test]
    async fn a_round_is_due_when_a_silent_members_lease_expires() {
        let config = kube::Config::new("https://127.0.0.1:1".parse().expect("a URL"));
        let client = kube::Client::try_from(config).expect("a client");
        let (_claims, receiver) = watch::channel(Claim::default());
        let mut m = Membership::new(client, MembersConfig::new("ns", "g", "a"), receiver);
        assert_eq!(m.next_round(), m.config.retry, "alone: every retry period");
        let now = Instant::now();
        // b's record last changed 14.5 s ago (lease 15 s): look again as it expires.
        m.observed.insert(
            "b".into(),
            ("t1".into(), now - Duration::from_millis(14_500)),
        );
        // c renewed just now, and this member's own record does not count.
        m.observed.insert("c".into(), ("t2".into(), now));
        m.observed.insert(
            "a".into(),
            ("t3".into(), now - Duration::from_millis(14_900)),
        );
        let due = m.next_round();
        assert!(
            due > Duration::from_millis(500) && due <= Duration::from_millis(520 + 50),
            "{due:?}"
        );
        // Once expired it no longer shortens the wait.
        m.observed
            .insert("b".into(), ("t1".into(), now - Duration::from_secs(20)));
        assert_eq!(m.next_round(), m.config.retry);
    }
}
