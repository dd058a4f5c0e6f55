//! A real etcd and kube-apiserver on loopback for end-to-end tests, the way envtest does it.
//!
//! [`TestEnv::start`] builds (or reuses) the pinned servers through `scripts/k8s-servers.sh`,
//! generates a CA, serving and client certificates and a service-account key, starts etcd and
//! kube-apiserver (RBAC on) on free loopback ports in a temporary folder, waits for `/readyz`,
//! and writes an admin kubeconfig. Dropping it stops both servers and removes the folder.
//! A failed start says which server failed and shows the last lines of its log.

pub mod agent_process;
pub mod double;
pub mod generate;
pub mod hostile_registry;
pub mod oci;
pub mod otel;
mod pki;
mod plugin_folder;
mod process;
pub mod proxy;
pub mod resources;

pub use plugin_folder::PluginFolder;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine as _;

use pki::Pki;
use process::Server;

/// How long a server may take to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(120);

/// The user the admin kubeconfig authenticates as (in group `system:masters`).
pub const ADMIN: &str = "kubewasm-admin";

/// Choices for a test environment.
#[derive(Debug, Clone)]
pub struct Options {
    /// Serve watches from kube-apiserver's watch cache (the default, as in clusters). With
    /// `false`, watches read etcd directly, so an etcd compaction makes old resource versions
    /// answer 410 Gone at once.
    pub watch_cache: bool,
    /// Serve streaming lists (`sendInitialEvents`, the WatchList feature, on by default
    /// since 1.34). With `false`, clients must fall back to paginated lists.
    pub streaming_lists: bool,
    /// Serve sharded list and watch (`shardSelector`, KEP-5866): kube-apiserver 1.36 with
    /// the `ShardedListAndWatch` gate on. With `false`, kube-apiserver 1.34, which has no
    /// such feature and ignores the parameter.
    pub sharded_lists: bool,
    /// Export kube-apiserver's own traces over OTLP/gRPC to this `host:port`, sampling only
    /// requests that arrive with a sampled `traceparent` (its spans then join the client's
    /// trace). None: no traces.
    pub traces_to: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            watch_cache: true,
            streaming_lists: true,
            sharded_lists: true,
            traces_to: None,
        }
    }
}

/// A running etcd and kube-apiserver.
pub struct TestEnv {
    // Field order is drop order: servers stop before their folder is removed.
    controller_manager: Option<Server>,
    apiserver: Option<Server>,
    // Held so that etcd stops on drop (after kube-apiserver).
    _etcd: Server,
    etcd_port: u16,
    port: u16,
    apiserver_program: PathBuf,
    apiserver_args: Vec<String>,
    pki: Pki,
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

/// The folder holding the `etcd` and `kube-apiserver` binaries: `$KUBEWASM_SERVERS`, or what
/// `scripts/k8s-servers.sh` prints (it builds them on first use).
pub fn servers_dir() -> anyhow::Result<PathBuf> {
    built_by(
        "KUBEWASM_SERVERS",
        "k8s-servers.sh",
        "etcd and kube-apiserver",
    )
}

/// The folder holding the other servers and tools the tests run (`registry`, `cosign`,
/// `helm`, `otelcol`): `$KUBEWASM_TEST_TOOLS`, or what `scripts/test-tools.sh` prints (it builds them on
/// first use).
pub fn tools_dir() -> anyhow::Result<PathBuf> {
    built_by(
        "KUBEWASM_TEST_TOOLS",
        "test-tools.sh",
        "the registry, cosign, helm and otelcol",
    )
}

/// The folder `$variable` names, or the one `scripts/{script}` prints after building `what`.
fn built_by(variable: &str, script: &str, what: &str) -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os(variable) {
        return Ok(dir.into());
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(script);
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed: cannot build {what} (is Go installed?)",
            script.display()
        );
    }
    Ok(String::from_utf8(out.stdout)?.trim().into())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Starts a server on ports [`free_port`] found free: tried again with other ports, up to
/// five times, while the server's log says one was taken before it could bind it (another
/// test's server, or an outgoing connection given it as its local port).
async fn start_on_free_ports<T>(
    log: &Path,
    mut start: impl AsyncFnMut() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut attempt = 1;
    loop {
        match start().await {
            Err(e)
                if attempt < 5 && process::log_tail(log, 30).contains("address already in use") =>
            {
                let _ = std::fs::remove_file(log);
                attempt += 1;
                tracing::debug!("a port was taken, trying again (attempt {attempt}): {e:#}");
            }
            other => return other,
        }
    }
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The API server's audit policy: writes at metadata level, nothing else.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
";

/// One write request the API server answered, from its audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audited {
    /// The user who sent it (`system:serviceaccount:NS:NAME` for a service account).
    pub user: String,
    /// The verb (`create`, `patch`, ...).
    pub verb: String,
    /// The resource (`pods`, `events`), with `/subresource` when there is one.
    pub resource: String,
    /// The namespace, empty for cluster-scoped objects.
    pub namespace: String,
    /// The object's name, empty for a create without one.
    pub name: String,
    /// The HTTP status code of the answer.
    pub code: u16,
    /// Sent as a dry run (`dryRun=All`): checked and admitted, persisted nowhere.
    pub dry_run: bool,
}

impl TestEnv {
    /// Write requests answered so far, oldest first (the API server's audit log).
    pub fn audited_writes(&self) -> anyhow::Result<Vec<Audited>> {
        let text = std::fs::read_to_string(self.dir.path().join("audit.log")).unwrap_or_default();
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line)?;
            if v["stage"] != "ResponseComplete" {
                continue;
            }
            let s = |p: &str| {
                v.pointer(p)
                    .and_then(|x| x.as_str())
                    .unwrap_or("")
                    .to_owned()
            };
            let sub = s("/objectRef/subresource");
            let resource = if sub.is_empty() {
                s("/objectRef/resource")
            } else {
                format!("{}/{sub}", s("/objectRef/resource"))
            };
            out.push(Audited {
                user: s("/user/username"),
                verb: s("/verb"),
                resource,
                namespace: s("/objectRef/namespace"),
                name: s("/objectRef/name"),
                code: v
                    .pointer("/responseStatus/code")
                    .and_then(|c| c.as_u64())
                    .and_then(|c| u16::try_from(c).ok())
                    .unwrap_or(0),
                dry_run: s("/requestURI").contains("dryRun=All"),
            });
        }
        Ok(out)
    }

    /// Starts etcd and kube-apiserver with default options.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(Options::default()).await
    }

    /// Starts etcd and kube-apiserver.
    pub async fn start_with(options: Options) -> anyhow::Result<Self> {
        let servers = servers_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("kubewasm-testenv-")
            .tempdir()?;
        let path = |name: &str| dir.path().join(name);
        let pki = Pki::new()?;
        let server = pki.server()?;
        for (name, text) in [
            ("audit-policy.yaml", AUDIT_POLICY.to_owned()),
            ("ca.crt", pki.ca_cert()),
            ("server.crt", server.cert),
            ("server.key", server.key),
            ("sa.key", pki.service_account_key.clone()),
            ("sa.pub", pki.service_account_public.clone()),
        ] {
            std::fs::write(path(name), text)?;
        }

        let (etcd, etcd_port) = start_on_free_ports(&path("etcd.log"), async || {
            let etcd_port = free_port()?;
            let peer_port = free_port()?;
            let client_url = format!("http://127.0.0.1:{etcd_port}");
            let peer_url = format!("http://127.0.0.1:{peer_port}");
            // A failed attempt may have begun a data directory for its own URLs.
            let _ = std::fs::remove_dir_all(path("etcd"));
            let etcd_args: Vec<String> = vec![
                "--name=default".into(),
                format!("--data-dir={}", path("etcd").display()),
                format!("--listen-client-urls={client_url}"),
                format!("--advertise-client-urls={client_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster=default={peer_url}"),
                "--unsafe-no-fsync".into(),
                "--log-level=warn".into(),
            ];
            let mut etcd =
                Server::start("etcd", &servers.join("etcd"), &etcd_args, &path("etcd.log"))?;
            wait_for(&mut etcd, || {
                etcd_request(etcd_port, "GET", "/health", "").is_ok_and(|b| b.contains("true"))
            })
            .await?;
            Ok((etcd, etcd_port))
        })
        .await?;
        let client_url = format!("http://127.0.0.1:{etcd_port}");

        let port = free_port()?;
        let issuer = "https://kubernetes.default.svc.cluster.local";
        let mut apiserver_args: Vec<String> = vec![
            format!("--etcd-servers={client_url}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            format!("--secure-port={port}"),
            format!("--cert-dir={}", path("certs").display()),
            format!("--tls-cert-file={}", path("server.crt").display()),
            format!("--tls-private-key-file={}", path("server.key").display()),
            format!("--client-ca-file={}", path("ca.crt").display()),
            format!("--service-account-issuer={issuer}"),
            format!("--service-account-key-file={}", path("sa.pub").display()),
            format!(
                "--service-account-signing-key-file={}",
                path("sa.key").display()
            ),
            "--authorization-mode=RBAC".into(),
            "--service-cluster-ip-range=10.96.0.0/24".into(),
            // No controller-manager creates default service accounts here.
            "--disable-admission-plugins=ServiceAccount".into(),
            "--endpoint-reconciler-type=none".into(),
            "--enable-priority-and-fairness=false".into(),
            format!("--watch-cache={}", options.watch_cache),
            // Every write, as metadata: tests count the requests a host sent.
            format!(
                "--audit-policy-file={}",
                path("audit-policy.yaml").display()
            ),
            format!("--audit-log-path={}", path("audit.log").display()),
            "--audit-log-mode=blocking".into(),
            if options.sharded_lists {
                format!(
                    "--feature-gates=WatchList={},ShardedListAndWatch=true",
                    options.streaming_lists
                )
            } else {
                format!("--feature-gates=WatchList={}", options.streaming_lists)
            },
        ];
        if let Some(endpoint) = &options.traces_to {
            // No sampling of its own: only what a client's sampled parent asks for.
            std::fs::write(
                path("tracing.yaml"),
                format!(
                    "apiVersion: apiserver.config.k8s.io/v1\nkind: TracingConfiguration\n\
                     endpoint: {endpoint}\nsamplingRatePerMillion: 0\n"
                ),
            )?;
            apiserver_args.push(format!(
                "--tracing-config-file={}",
                path("tracing.yaml").display()
            ));
        }
        let apiserver_log = path("kube-apiserver.log");
        let mut env = Self {
            controller_manager: None,
            apiserver: None,
            _etcd: etcd,
            etcd_port,
            port,
            apiserver_program: servers.join(if options.sharded_lists {
                "kube-apiserver"
            } else {
                "kube-apiserver-1.34"
            }),
            apiserver_args,
            pki,
            kubeconfig: path("admin.kubeconfig"),
            dir,
        };
        start_on_free_ports(&apiserver_log, async || {
            env.write_kubeconfig(&env.kubeconfig, ADMIN, &["system:masters"])?;
            let started = env.start_apiserver().await;
            if started.is_err() {
                // The next attempt's port, if this one's was taken.
                env.port = free_port()?;
                for arg in &mut env.apiserver_args {
                    if arg.starts_with("--secure-port=") {
                        *arg = format!("--secure-port={}", env.port);
                    }
                }
            }
            started
        })
        .await?;
        Ok(env)
    }

    /// Starts the real kube-controller-manager (built with the servers, at the API server's
    /// version) against this API server, with the controllers a test of owned objects needs:
    /// the garbage collector, namespaces, Deployments, ReplicaSets and Jobs. Nothing else: no
    /// service account tokens, certificate signing or node lifecycle.
    pub async fn start_controller_manager(&mut self) -> anyhow::Result<()> {
        let program = servers_dir()?.join("kube-controller-manager");
        let log = self.dir.path().join("kube-controller-manager.log");
        let kubeconfig = self.kubeconfig.display().to_string();
        let certs = self.dir.path().join("kcm-certs");
        let mut server = start_on_free_ports(&log, async || {
            let args: Vec<String> = vec![
                format!("--kubeconfig={kubeconfig}"),
                format!("--authentication-kubeconfig={kubeconfig}"),
                format!("--authorization-kubeconfig={kubeconfig}"),
                "--controllers=garbagecollector,namespace,deployment,replicaset,job".into(),
                "--leader-elect=false".into(),
                "--use-service-account-credentials=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", free_port()?),
                format!("--cert-dir={}", certs.display()),
                "--concurrent-gc-syncs=5".into(),
                "--v=1".into(),
            ];
            let mut server = Server::start("kube-controller-manager", &program, &args, &log)?;
            // Started when its informers have synced; a test polls for what it does anyway.
            let deadline = Instant::now() + READY_TIMEOUT;
            loop {
                let tail = server.log_tail(400);
                if tail.contains("Caches are synced") || tail.contains("Started controller") {
                    return Ok(server);
                }
                if !server.is_running() || Instant::now() > deadline {
                    bail!(
                        "kube-controller-manager did not start (running: {}); last log lines:\n{}",
                        server.is_running(),
                        server.log_tail(30)
                    );
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
        .await?;
        anyhow::ensure!(server.is_running(), "kube-controller-manager stopped");
        self.controller_manager = Some(server);
        Ok(())
    }

    async fn start_apiserver(&mut self) -> anyhow::Result<()> {
        let log = self.dir.path().join("kube-apiserver.log");
        let mut server = Server::start(
            "kube-apiserver",
            &self.apiserver_program,
            &self.apiserver_args,
            &log,
        )?;
        let client = self.client().await?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let ready = client
                .request_text(http::Request::get("/readyz").body(Vec::new())?)
                .await
                .is_ok_and(|body| body.trim() == "ok");
            if ready {
                break;
            }
            if !server.is_running() || Instant::now() > deadline {
                bail!(
                    "kube-apiserver did not become ready (running: {}); last log lines:\n{}",
                    server.is_running(),
                    server.log_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        self.apiserver = Some(server);
        Ok(())
    }

    /// The admin kubeconfig (user [`ADMIN`], group `system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The API server's URL.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The API server's address.
    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// An admin client that reaches the API server through `addr` (a proxy in front of it).
    pub async fn admin_client_via(
        &self,
        addr: std::net::SocketAddr,
    ) -> anyhow::Result<kube::Client> {
        let file = kube::config::Kubeconfig::read_from(self.kubeconfig())?;
        let mut config =
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await?;
        config.cluster_url = format!("https://{addr}").parse()?;
        Ok(kube::Client::try_from(config)?)
    }

    /// The test CA's certificate (PEM): a webhook's caBundle.
    pub fn ca_cert(&self) -> String {
        self.pki.ca_cert()
    }

    /// A fresh serving certificate for 127.0.0.1 and localhost signed by the test CA (a
    /// webhook server's, which the API server trusts through [`Self::ca_cert`]).
    pub fn serving_cert(&self) -> anyhow::Result<pki::CertAndKey> {
        self.pki.server()
    }

    /// The temporary folder holding certificates, data and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a kubeconfig for `user` in `groups` (a client certificate signed by the test
    /// CA) and returns its path. Grant it permissions with [`resources::grant`].
    pub fn identity(&self, user: &str, groups: &[&str]) -> anyhow::Result<PathBuf> {
        let path = self.dir.path().join(format!("{user}.kubeconfig"));
        self.write_kubeconfig(&path, user, groups)?;
        Ok(path)
    }

    fn write_kubeconfig(&self, path: &Path, user: &str, groups: &[&str]) -> anyhow::Result<()> {
        let cert = self.pki.client(user, groups)?;
        let credentials = serde_json::json!({
            "client-certificate-data": b64(&cert.cert),
            "client-key-data": b64(&cert.key),
        });
        self.write_kubeconfig_with(path, user, credentials)
    }

    /// Writes a kubeconfig for this server with `user`'s `credentials` (kubeconfig `user`).
    fn write_kubeconfig_with(
        &self,
        path: &Path,
        user: &str,
        credentials: serde_json::Value,
    ) -> anyhow::Result<()> {
        let config = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {
                "server": self.url(),
                "certificate-authority-data": b64(&self.pki.ca_cert()),
            }}],
            "users": [{"name": user, "user": credentials}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
            "current-context": "test",
        });
        std::fs::write(path, serde_json::to_string_pretty(&config)?)?;
        Ok(())
    }

    /// A client acting as service account `namespace/name` (created if missing), with a
    /// token from the TokenRequest API, as a pod's projected token would be.
    pub async fn service_account_client(
        &self,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<kube::Client> {
        use k8s_openapi::api::authentication::v1::TokenRequest;
        use k8s_openapi::api::core::v1::ServiceAccount;
        use kube::api::{Api, PostParams};
        let admin = self.client().await?;
        let accounts = Api::<ServiceAccount>::namespaced(admin, namespace);
        if accounts.get_opt(name).await?.is_none() {
            let account: ServiceAccount =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
            accounts.create(&PostParams::default(), &account).await?;
        }
        let request: TokenRequest = serde_json::from_value(
            serde_json::json!({"spec": {"audiences": [], "expirationSeconds": 3600}}),
        )?;
        let token = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await
            .with_context(|| format!("token for service account {namespace}/{name}"))?
            .status
            .context("token request has no status")?
            .token;
        let path = self
            .dir
            .path()
            .join(format!("sa-{namespace}-{name}.kubeconfig"));
        self.write_kubeconfig_with(&path, name, serde_json::json!({"token": token}))?;
        client_from(&path).await
    }

    /// An admin client.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        client_from(&self.kubeconfig).await
    }

    /// Freezes kube-apiserver (SIGSTOP: connections stay open, nothing is answered), or
    /// lets it go on (SIGCONT).
    pub fn freeze_apiserver(&self, frozen: bool) -> anyhow::Result<()> {
        let server = self
            .apiserver
            .as_ref()
            .context("kube-apiserver is not running")?;
        server.pause(frozen)?;
        Ok(())
    }

    /// Stops kube-apiserver and starts it again on the same port and etcd; waits for ready.
    pub async fn restart_apiserver(&mut self) -> anyhow::Result<()> {
        if let Some(mut server) = self.apiserver.take() {
            server.stop();
        }
        self.start_apiserver().await
    }

    /// Stops kube-apiserver (until [`Self::restart_apiserver`]).
    pub fn stop_apiserver(&mut self) {
        if let Some(mut server) = self.apiserver.take() {
            server.stop();
        }
    }

    /// Compacts etcd's history up to its current revision, so watches from older resource
    /// versions get 410 Gone. Returns the revision compacted to.
    pub fn compact_etcd(&self) -> anyhow::Result<u64> {
        // The key "\0" with range_end "\0" asks for every key; count_only keeps it cheap.
        let body = etcd_request(
            self.etcd_port,
            "POST",
            "/v3/kv/range",
            r#"{"key":"AA==","range_end":"AA==","count_only":true}"#,
        )?;
        let value: serde_json::Value = serde_json::from_str(&body)?;
        let revision: u64 = value
            .pointer("/header/revision")
            .and_then(|r| r.as_str())
            .context("etcd range answer has no header.revision")?
            .parse()?;
        etcd_request(
            self.etcd_port,
            "POST",
            "/v3/kv/compaction",
            &format!(r#"{{"revision":"{revision}","physical":true}}"#),
        )?;
        Ok(revision)
    }

    /// Deletes one object behind the API server's back, straight from etcd (for example
    /// `/registry/configmaps/ns/name`), as if the deletion happened while a client was away.
    /// Returns whether a key was deleted.
    pub fn etcd_delete(&self, key: &str) -> anyhow::Result<bool> {
        let body = etcd_request(
            self.etcd_port,
            "POST",
            "/v3/kv/deleterange",
            &format!(r#"{{"key":"{}"}}"#, b64(key)),
        )?;
        let value: serde_json::Value = serde_json::from_str(&body)?;
        Ok(value.get("deleted").and_then(|d| d.as_str()) == Some("1"))
    }

    /// The last lines of a server's log (`etcd` or `kube-apiserver`).
    pub fn log_tail(&self, server: &str, lines: usize) -> String {
        process::log_tail(&self.dir.path().join(format!("{server}.log")), lines)
    }
}

/// A client from a kubeconfig file.
pub async fn client_from(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
            .await?;
    Ok(kube::Client::try_from(config)?)
}

async fn wait_for(server: &mut Server, ready: impl Fn() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    while !ready() {
        if !server.is_running() || Instant::now() > deadline {
            bail!(
                "{} did not become ready; last log lines:\n{}",
                server.name(),
                server.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// One plain HTTP/1.1 request to etcd's JSON gateway; returns the body of a 200 answer.
fn etcd_request(port: u16, method: &str, path: &str, body: &str) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .context("malformed HTTP answer from etcd")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!(
            "etcd {method} {path}: {}",
            head.lines().next().unwrap_or("")
        );
    }
    // A chunked body: drop the chunk-size lines (the gateway answers are small).
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let joined: String = body
            .split("\r\n")
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, s)| s)
            .collect();
        return Ok(joined);
    }
    Ok(body.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_start_is_tried_again_only_when_its_port_was_taken() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("server.log");
        let mut calls = 0;
        let started = start_on_free_ports(&log, async || {
            calls += 1;
            if calls < 3 {
                std::fs::write(&log, "listen tcp 127.0.0.1:1: bind: address already in use")?;
                bail!("did not become ready");
            }
            Ok(calls)
        })
        .await?;
        assert_eq!(started, 3);

        let mut calls = 0;
        let failed = start_on_free_ports(&log, async || -> anyhow::Result<()> {
            calls += 1;
            std::fs::write(&log, "flag provided but not defined")?;
            bail!("did not become ready")
        })
        .await;
        assert!(failed.is_err());
        assert_eq!(calls, 1, "any other failure is final");

        let mut calls = 0;
        let failed = start_on_free_ports(&log, async || -> anyhow::Result<()> {
            calls += 1;
            std::fs::write(&log, "bind: address already in use")?;
            bail!("did not become ready")
        })
        .await;
        assert!(failed.is_err());
        assert_eq!(calls, 5, "five attempts at most");
        Ok(())
    }
}
