//! Where a process's peers are: timely's configuration from the options, and the local cluster
//! a user gets on one machine with `--processes N` and no hostfile.
//!
//! A local cluster is this program started N−1 more times with the same arguments, each told
//! its process index and the cluster's addresses (free ports on 127.0.0.1) through the
//! environment. Timely
//! is SPMD: every process runs the same program, so each of the program's pipeline runs is run
//! by all of them, in the same order, over the same addresses. The children's standard error
//! is this process's (their standard output, which would repeat this process's tables, is
//! dropped), and a child whose parent is gone exits: the cluster stops together.

use crate::options::TimelyOptions;
use std::sync::Mutex;
use weir_sdk::{Error, Result};

/// The environment variable giving a local cluster's addresses (comma-separated), set for its
/// children.
const HOSTS_ENV: &str = "WEIR_TIMELY_LOCAL_HOSTS";
/// The environment variable giving a local cluster child its process index.
const PROCESS_ENV: &str = "WEIR_TIMELY_LOCAL_PROCESS";

/// The environment variable giving a local cluster's children the file in which the first
/// process lists the runs it drains (one run index per line).
const DRAIN_ENV: &str = "WEIR_TIMELY_LOCAL_DRAIN";

/// Pipeline runs started in this process so far: every process of a cluster runs the same
/// pipelines in the same order, so a run's index names it across the cluster.
static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The run in progress in this process and its job, for a drain requested by the first process.
static CURRENT: Mutex<Option<(u64, std::sync::Weak<weir_runner_core::job::Job>)>> = Mutex::new(None);

/// The index of a new pipeline run.
pub(crate) fn next_run() -> u64 {
    RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

/// Records that run `run` is in progress with `job`.
pub(crate) fn running(run: u64, job: &std::sync::Arc<weir_runner_core::job::Job>) {
    *CURRENT.lock().unwrap_or_else(|e| e.into_inner()) = Some((run, std::sync::Arc::downgrade(job)));
}

/// The drain file of the local cluster this process started or belongs to.
fn drain_file() -> std::path::PathBuf {
    match std::env::var_os(DRAIN_ENV) {
        Some(path) => path.into(),
        None => std::env::temp_dir().join(format!("weir-timely-drain-{}", std::process::id())),
    }
}

/// Drains run `run` on the other processes of the local cluster this process started (a drain
/// is requested of each process; without a local cluster there are none to tell). The children
/// notice within a fraction of a second.
pub(crate) fn drain_local(run: u64) -> Result<()> {
    if LOCAL.lock().unwrap_or_else(|e| e.into_inner()).is_none() {
        return Ok(());
    }
    use std::io::Write;
    let path = drain_file();
    std::fs::OpenOptions::new().create(true).append(true).open(&path).and_then(|mut f| writeln!(f, "{run}")).map_err(
        |e| Error::Execution {
            step: "timely cluster".into(),
            message: format!("cannot tell the local cluster to drain through {}: {e}", path.display()),
        },
    )
}

/// In a local cluster's child: drains the current run once the first process listed it.
fn drain_if_listed() {
    let Ok(listed) = std::fs::read_to_string(drain_file()) else { return };
    let current = CURRENT.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Some((run, job)) = current {
        if listed.lines().any(|l| l.trim().parse() == Ok(run)) {
            if let Some(job) = job.upgrade() {
                job.request_drain();
            }
        }
    }
}

/// The local cluster this process started, if any: its addresses and children.
struct LocalCluster {
    processes: usize,
    addresses: Vec<String>,
    children: Vec<std::process::Child>,
}

static LOCAL: Mutex<Option<LocalCluster>> = Mutex::new(None);

/// The options this process runs with: as given, or, in a local cluster, with its addresses and
/// index (starting the cluster's other processes first if this is its first process).
pub(crate) fn resolve(t: &TimelyOptions) -> Result<TimelyOptions> {
    let mut t = t.clone();
    if let (Ok(hosts), Ok(index)) = (std::env::var(HOSTS_ENV), std::env::var(PROCESS_ENV)) {
        // A child of a local cluster.
        t.local_addresses = Some(hosts.split(',').map(String::from).collect());
        t.process_id = index.parse().map_err(|_| Error::Options(format!("{PROCESS_ENV}={index} is not an index")))?;
        watch_parent();
        return Ok(t);
    }
    if t.processes <= 1 || t.hostfile.is_some() {
        return Ok(t);
    }
    if t.process_id != 0 {
        return Err(Error::Options(format!(
            "--process-id {} needs --hostfile: without one, process 0 starts a local cluster of {} processes itself",
            t.process_id, t.processes
        )));
    }
    let mut local = LOCAL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = local.as_mut() {
        if c.processes != t.processes {
            return Err(Error::Options(format!(
                "this program already runs a local cluster of {} processes; it cannot also run one of {}",
                c.processes, t.processes
            )));
        }
        if let Some((i, status)) =
            c.children.iter_mut().enumerate().find_map(|(i, ch)| ch.try_wait().ok().flatten().map(|s| (i + 1, s)))
        {
            return Err(Error::Execution {
                step: "timely cluster".into(),
                message: format!("process {i} of the local cluster has exited ({status})"),
            });
        }
        t.local_addresses = Some(c.addresses.clone());
        return Ok(t);
    }
    let cluster = start(t.processes)?;
    t.local_addresses = Some(cluster.addresses.clone());
    *local = Some(cluster);
    Ok(t)
}

/// Starts processes 1..n of a local cluster on free ports of 127.0.0.1.
fn start(n: usize) -> Result<LocalCluster> {
    let fail = |m: String| Error::Execution { step: "timely cluster".into(), message: m };
    // Free ports: bound and released at once (each process binds its own again).
    let listeners = free_listeners(n).map_err(|e| fail(format!("cannot find free ports on 127.0.0.1: {e}")))?;
    let mut ports = Vec::with_capacity(n);
    for l in &listeners {
        ports.push(l.local_addr().map_err(|e| fail(e.to_string()))?.port());
    }
    drop(listeners);
    let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let exe = std::env::current_exe().map_err(|e| fail(format!("cannot find this program to start it again: {e}")))?;
    let mut children = Vec::with_capacity(n - 1);
    let _ = std::fs::remove_file(drain_file());
    for i in 1..n {
        let child = std::process::Command::new(&exe)
            .args(std::env::args_os().skip(1))
            .env(HOSTS_ENV, addresses.join(","))
            .env(PROCESS_ENV, i.to_string())
            .env(DRAIN_ENV, drain_file())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .map_err(|e| fail(format!("cannot start process {i} of the local cluster ({}): {e}", exe.display())))?;
        children.push(child);
    }
    tracing::info!(processes = n, addresses = %addresses.join(","), "started a local timely cluster");
    Ok(LocalCluster { processes: n, addresses, children })
}

/// `n` listeners on free ports of 127.0.0.1 below the system's ephemeral range. Between their
/// release and each process binding its port again, a port of the ephemeral range may be
/// taken: by any outgoing connection's local end, or by anything bound to port 0 (a harness, a
/// job server). Ports below it are taken only by name. Falls back to any free port.
fn free_listeners(n: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    use rand::Rng;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let low = 10_000u16.min(ephemeral / 2).max(1024);
    let mut rng = rand::rng();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n * 64 {
        if out.len() == n || ephemeral <= low {
            break;
        }
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", rng.random_range(low..ephemeral))) {
            out.push(l);
        }
    }
    while out.len() < n {
        out.push(std::net::TcpListener::bind("127.0.0.1:0")?);
    }
    Ok(out)
}

/// In a local cluster's child: exits once the process that started it is gone, and drains the
/// current run when the first process drains it.
fn watch_parent() {
    static WATCHING: std::sync::Once = std::sync::Once::new();
    WATCHING.call_once(|| {
        let parent = std::os::unix::process::parent_id();
        let _ = std::thread::Builder::new().name("weir-timely-parent".into()).spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_millis(100));
            drain_if_listed();
            if std::os::unix::process::parent_id() != parent {
                eprintln!("weir: the first process of the local timely cluster is gone; stopping");
                std::process::exit(1);
            }
        });
    });
}

/// How long a process waits for the others of its cluster to start and connect.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Runs `func` on every worker of this process: threads of one process, or this process's part
/// of a cluster, connected to its peers first (quietly, polling every few milliseconds, and
/// giving up with an error naming a peer that never answers), with [`Heartbeats`] watching
/// them until the workers' results are joined.
pub(crate) fn execute<T, F>(t: &TimelyOptions, run: u64, func: F) -> Result<Vec<std::result::Result<T, String>>>
where
    T: Send + 'static,
    F: Fn(&mut timely::worker::Worker) -> T + Send + Sync + 'static,
{
    use timely_communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
    use timely_communication::allocator::{AllocatorBuilder, ProcessBuilder};
    let fail = |m: String| Error::Execution { step: "timely cluster".into(), message: m };
    let threads = t.workers.max(1);
    if t.processes <= 1 {
        return timely::execute(timely::Config::process(threads), func).map(|g| g.join()).map_err(fail);
    }
    let Some(addresses) = t.addresses()? else {
        return Err(Error::Options(format!(
            "--processes {} needs --hostfile naming every process's host:port",
            t.processes
        )));
    };
    let sockets = connect(&addresses, t.process_id)?;
    let clones = sockets.iter().flatten().map(|s| s.try_clone()).collect::<std::io::Result<Vec<_>>>();
    let clones = clones.map_err(|e| fail(format!("cannot watch the cluster's connections: {e}")))?;
    let timeout = std::time::Duration::from_secs(t.peer_timeout_secs.max(1));
    let beats = Heartbeats::start(&addresses, t.process_id, run, timeout, clones);
    let hooks = timely_communication::Hooks::default();
    let allocators = ProcessBuilder::new_typed_vector(threads, hooks.refill.clone(), hooks.spill.clone());
    let (builders, guard) = initialize_networking_from_sockets(allocators, sockets, t.process_id, threads, hooks)
        .map_err(|e| fail(format!("cannot start the cluster's networking: {e}")))?;
    let builders = builders.into_iter().map(AllocatorBuilder::Tcp).collect();
    let guards = timely::execute::execute_from(builders, Box::new(guard), timely::WorkerConfig::default(), func)
        .map_err(fail)?;
    let results = guards.join();
    drop(beats);
    Ok(results)
}

/// The heartbeats of a cluster's processes: each process's own thread (not its workers, which
/// may be busy with an epoch) sends a datagram to every other process twice a second, from and
/// to the UDP port of each process's address, and notes when it last heard from each. A peer
/// not heard from for the timeout (`--peer-timeout`) is stopped, hung or cut off, though its
/// connections stay open: it is taken for lost ([`lost_error`]), and the connections to the
/// cluster are shut, so that neither the workers nor timely's network threads wait for it.
/// A process that ends its run says goodbye, so the others do not wait for its heartbeats.
pub(crate) struct Heartbeats {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// A heartbeat: the run's index (a late goodbye of the last run is not this run's), the
/// sender's process index, and whether it is its last (the run ended there).
fn beat(run: u64, me: usize, last: bool) -> [u8; 17] {
    let mut b = [0u8; 17];
    b[..8].copy_from_slice(&run.to_be_bytes());
    b[8..16].copy_from_slice(&(me as u64).to_be_bytes());
    b[16] = u8::from(last);
    b
}

impl Heartbeats {
    fn start(
        addresses: &[String],
        me: usize,
        run: u64,
        timeout: std::time::Duration,
        connections: Vec<std::net::TcpStream>,
    ) -> Option<Heartbeats> {
        use std::time::{Duration, Instant};
        let socket = match std::net::UdpSocket::bind(&addresses[me]) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(
                    address = %addresses[me],
                    "cannot listen for the cluster's heartbeats ({e}): a process that goes silent will not be noticed"
                );
                return None;
            }
        };
        let _ = socket.set_read_timeout(Some(Duration::from_millis(100)));
        let n = addresses.len();
        let peers: Vec<(usize, String)> =
            addresses.iter().enumerate().filter(|(i, _)| *i != me).map(|(i, a)| (i, a.clone())).collect();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new().name("weir-heartbeats".into()).spawn(move || {
            let start = Instant::now();
            let mut heard: Vec<Option<Instant>> = vec![Some(start); n];
            let mut sent: Option<Instant> = None;
            let mut buf = [0u8; 32];
            while !stopping.load(std::sync::atomic::Ordering::SeqCst) {
                if sent.is_none_or(|s| s.elapsed() >= Duration::from_millis(500)) {
                    for (_, a) in &peers {
                        let _ = socket.send_to(&beat(run, me, false), a);
                    }
                    sent = Some(Instant::now());
                }
                if let Ok((17, _)) = socket.recv_from(&mut buf) {
                    let of_run = u64::from_be_bytes(buf[..8].try_into().unwrap_or_default());
                    let from = u64::from_be_bytes(buf[8..16].try_into().unwrap_or_default()) as usize;
                    if let Some(h) = heard.get_mut(from).filter(|_| of_run == run) {
                        *h = (buf[16] == 0).then(Instant::now);
                    }
                }
                let silent = peers.iter().find(|(i, _)| heard[*i].is_some_and(|t| t.elapsed() > timeout));
                if let Some((i, a)) = silent {
                    let mut lost = LOST.lock().unwrap_or_else(|e| e.into_inner());
                    if lost.is_none() {
                        *lost = Some((
                            *i,
                            format!(
                                "not heard from at {a} for {}s (--peer-timeout): it is stopped, hung or cut off",
                                timeout.as_secs()
                            ),
                        ));
                    }
                    drop(lost);
                    for c in &connections {
                        let _ = c.shutdown(std::net::Shutdown::Both);
                    }
                    return;
                }
            }
            for (_, a) in &peers {
                let _ = socket.send_to(&beat(run, me, true), a);
            }
        });
        match thread {
            Ok(t) => Some(Heartbeats { stop, thread: Some(t) }),
            Err(e) => {
                tracing::warn!(
                    "cannot start the cluster's heartbeats ({e}): a process that goes silent will not be noticed"
                );
                None
            }
        }
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Timely's connections between processes: process `me` listens at its own address for every
/// later process and connects to every earlier one, each connecting side sending its index
/// (eight bytes, big-endian), as timely's own setup does. Entry `i` is the connection to
/// process `i`; `None` at `me`.
fn connect(addresses: &[String], me: usize) -> Result<Vec<Option<std::net::TcpStream>>> {
    use std::io::{Read, Write};
    use std::time::Instant;
    let fail = |m: String| Error::Execution { step: "timely cluster".into(), message: m };
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let listener = std::net::TcpListener::bind(&addresses[me])
        .map_err(|e| fail(format!("process {me} cannot listen at {}: {e}", addresses[me])))?;
    listener.set_nonblocking(true).map_err(|e| fail(e.to_string()))?;
    let later = addresses.len() - me - 1;
    let accepting = std::thread::spawn(move || -> std::result::Result<Vec<Option<std::net::TcpStream>>, String> {
        let mut got: Vec<Option<std::net::TcpStream>> = (0..later).map(|_| None).collect();
        while got.iter().any(Option::is_none) {
            match listener.accept() {
                Ok((mut stream, _)) => {
                    stream.set_nonblocking(false).map_err(|e| e.to_string())?;
                    stream.set_nodelay(true).map_err(|e| e.to_string())?;
                    let mut index = [0u8; 8];
                    stream.read_exact(&mut index).map_err(|e| format!("a peer connected but sent no index: {e}"))?;
                    let i = u64::from_be_bytes(index) as usize;
                    match i.checked_sub(me + 1).and_then(|k| got.get_mut(k)) {
                        Some(slot) if slot.is_none() => *slot = Some(stream),
                        _ => {
                            return Err(format!("a peer connected as process {i}, which process {me} does not expect"))
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        let missing: Vec<usize> =
                            got.iter().enumerate().filter(|(_, s)| s.is_none()).map(|(k, _)| me + 1 + k).collect();
                        return Err(format!("processes {missing:?} did not connect within {CONNECT_TIMEOUT:?}"));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(got)
    });
    let mut out: Vec<Option<std::net::TcpStream>> = Vec::with_capacity(addresses.len());
    for (i, address) in addresses.iter().enumerate().take(me) {
        let stream = loop {
            match std::net::TcpStream::connect(address) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => {
                    return Err(fail(format!("cannot reach process {i} at {address} within {CONNECT_TIMEOUT:?}: {e}")))
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(5)),
            }
        };
        stream.set_nodelay(true).map_err(|e| fail(e.to_string()))?;
        (&stream).write_all(&(me as u64).to_be_bytes()).map_err(|e| fail(format!("process {i} at {address}: {e}")))?;
        out.push(Some(stream));
    }
    out.push(None);
    let later = accepting.join().map_err(|_| fail("the thread accepting connections stopped".into()))?.map_err(fail)?;
    out.extend(later);
    Ok(out)
}

/// The first connection to another process that broke in this process: that process's index
/// and timely's words for it.
static LOST: Mutex<Option<(usize, String)>> = Mutex::new(None);

/// Notes which process a broken connection led to: timely's communication threads, named
/// `timely:send-N` and `timely:recv-N` after the process N they talk to, panic when it goes away.
pub(crate) fn watch_connections() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            let peer =
                thread.name().and_then(|n| n.strip_prefix("timely:recv-").or_else(|| n.strip_prefix("timely:send-")));
            let message = weir_sdk::panic::panic_message(info.payload());
            if let Some(i) = peer.and_then(|i| i.parse::<usize>().ok()) {
                let mut lost = LOST.lock().unwrap_or_else(|e| e.into_inner());
                if lost.is_none() && !message.contains("poisoned") {
                    *lost = Some((i, message));
                }
                // Reported as the lost process, once, by the runner's error.
                return;
            }
            // What a lost connection does next to the workers and the guards is the same loss.
            let consequence = message.contains("MergeQueue poisoned") || message.contains("thread panic");
            if consequence && LOST.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
                return;
            }
            previous(info);
        }));
    });
}

/// The process whose connection broke first, if one did (taken: the next run starts clean).
pub(crate) fn lost_process() -> Option<(usize, String)> {
    LOST.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// The error of a lost process, if a connection broke (left for [`lost_process`]).
pub(crate) fn lost_error() -> Option<weir_sdk::Error> {
    LOST.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|(i, why)| lost(*i, why))
}

/// The error that process `i` of the cluster is gone.
pub(crate) fn lost(i: usize, why: &str) -> weir_sdk::Error {
    weir_sdk::Error::Execution {
        step: "timely cluster".into(),
        message: format!("lost process {i} of the cluster ({why}); stopping"),
    }
}
