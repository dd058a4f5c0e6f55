//! The agent's log setup for the benchmarks, its lines written nowhere.

/// Installs the subscriber `kubewasm run` installs (its default filter), writing to a sink.
///
/// Without one, `tracing` hands every disabled span and event to the `log` crate instead
/// (its `log` feature, which a dependency enables), so each `debug_span!` on the delivery
/// path reads its fields: a cost the agent, which installs its subscriber first, never pays.
pub fn as_the_agent() {
    let installed = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            kubewasm::agent::LOG_FILTER,
        ))
        .with_writer(std::io::sink)
        .try_init();
    if let Err(e) = installed {
        panic!("a subscriber was already installed: {e}");
    }
}
