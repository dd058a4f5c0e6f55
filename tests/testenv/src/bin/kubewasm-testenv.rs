//! Starts the test etcd and kube-apiserver and keeps them up until Ctrl-C, printing the admin
//! kubeconfig for `kubectl` or `kubewasm run --kubeconfig`.

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let env = kubewasm_testenv::TestEnv::start().await?;
    println!("kube-apiserver: {}", env.url());
    println!("kubeconfig:     {}", env.kubeconfig().display());
    println!("logs:           {}", env.dir().display());
    println!("Ctrl-C (or SIGTERM) stops both servers and removes the folder.");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r?,
        _ = term.recv() => {}
    }
    drop(env);
    Ok(())
}
