//! A call's deadline counts the CPU time it used, not the time its thread waited for a core
//! (`wasm/deadline.rs`). Its own test binary: it keeps a core busy, which would slow the timed
//! checks of tests running beside it.

use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use kubewasm::plugins::PluginStatus;
use kubewasm::wasm::logging::MemorySink;

mod support;

const WAIT: Duration = Duration::from_secs(60);

fn cm(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: t}}\n")
}

/// Pins thread `tid` of this process (0: the calling thread) to CPU 0.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn pin_to_cpu_0(tid: i32) {
    // SAFETY: the set is a plain bit mask on the stack, sized by the type passed.
    let ok = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    assert_eq!(ok, 0, "sched_setaffinity({tid})");
}

#[cfg(target_os = "linux")]
#[test]
fn a_call_waiting_for_a_core_is_not_charged_for_the_wait() {
    // A plugin that burns about 20 ms of CPU per event, with a 100 ms deadline, made to share
    // one core with a busy thread at the host's priority: it gets about a tenth of that core,
    // so each call takes about 200 ms by the wall clock. Only the time it ran counts, so every
    // call is delivered; stopping it at 100 ms would retry it for ever. (With two rivals a call
    // took about 400 ms, and now and then past the wall-clock cap of ten deadlines, 1 s, when
    // the shared machine gave the core to others besides.)
    let runtime = support::tokio();
    let cluster = tempfile::tempdir().expect("temp dir");
    fs::write(cluster.path().join("cm-1.yaml"), cm("cm-1")).expect("write");
    let mut config = support::configs(&[("starved", r#"{"mode": "slow"}"#)]);
    let settings = config.plugins.named.get_mut("starved").expect("configured");
    settings.limits.deadline = Duration::from_millis(100);
    settings.delivery.max_attempts = 3;
    let sink = Arc::new(MemorySink::default());
    let (agent, folder) = support::snapshot_agent(&runtime, cluster.path(), config, sink);
    let plugins = kubewasm_testenv::PluginFolder::new();
    let file = plugins.put("starved", kubewasm_plugin_artifacts::HOSTILE);
    agent.plugins().load(&file).expect("loads");
    let status = || {
        agent
            .plugins()
            .status()
            .into_iter()
            .find(|s| s.name == "starved")
            .expect("loaded")
    };
    let until = |done: &dyn Fn(&PluginStatus) -> bool| {
        let end = Instant::now() + WAIT;
        loop {
            let s = status();
            if done(&s) || Instant::now() > end {
                return s;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let before = until(&|s| s.delivered >= 1);
    assert_eq!(before.delivered, 1, "{before:?}");

    let worker = support::threads()
        .into_iter()
        .find(|(_, command, _)| command == "plugin-starved")
        .and_then(|(id, _, _)| id.parse().ok())
        .expect("the plugin's thread");
    pin_to_cpu_0(worker);
    // A busy rival: a thread just woken runs ahead of its share for a few milliseconds only.
    let (stop, spinning) = (Arc::new(AtomicBool::new(false)), Arc::new(Barrier::new(2)));
    let rivals: Vec<_> = (0..1)
        .map(|_| {
            let (stop, spinning) = (stop.clone(), spinning.clone());
            std::thread::spawn(move || {
                pin_to_cpu_0(0);
                spinning.wait();
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    spinning.wait();
    // New objects, so no event can be coalesced with another.
    for i in 2..=4 {
        let name = format!("cm-{i}");
        fs::write(cluster.path().join(format!("{name}.yaml")), cm(&name)).expect("write");
        folder.rescan();
    }
    let after = until(&|s| s.delivered + s.given_up >= 4);
    stop.store(true, Ordering::Relaxed);
    for rival in rivals {
        rival.join().expect("rival");
    }

    assert_eq!(
        (after.delivered, after.traps, after.given_up),
        (4, 0, 0),
        "{after:?}"
    );
    // The calls did wait: they lasted past the deadline by the wall clock (the bucket of
    // calls up to 0.1 s is the ninth).
    let longer = after.durations.count - after.durations.cumulative[8];
    assert!(longer >= 3, "calls over 100 ms: {longer}; {after:?}");
}
