//! SIGINT and SIGTERM for the launcher: the first asks the running pipeline to stop after its
//! current batch commits, so the summary and perf record of what ran can still be written and a
//! checkpointed run resumes exactly once; a second one ends the process at once, with the same
//! exit status (130 for SIGINT, 143 for SIGTERM). SIGUSR1 drains the running pipeline instead
//! (Beam's drain: no more reading, every window and timer fired, then done).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// Which stop signal arrived, if any.
pub(crate) struct Interrupt {
    received: Arc<AtomicBool>,
    signal: Arc<AtomicUsize>,
}

impl Interrupt {
    /// The process's handlers, installed on first use.
    pub(crate) fn get() -> &'static Interrupt {
        static INTERRUPT: OnceLock<Interrupt> = OnceLock::new();
        INTERRUPT.get_or_init(|| {
            let i = Interrupt { received: Arc::default(), signal: Arc::default() };
            for (sig, code) in [(signal_hook::consts::SIGINT, 130), (signal_hook::consts::SIGTERM, 143)] {
                // Order matters: the conditional exit sees the flag the first signal set.
                let installed = signal_hook::flag::register_conditional_shutdown(sig, code, i.received.clone())
                    .and_then(|_| signal_hook::flag::register_usize(sig, i.signal.clone(), sig as usize))
                    .and_then(|_| signal_hook::flag::register(sig, i.received.clone()));
                if let Err(e) = installed {
                    tracing::warn!("cannot handle signal {sig}: {e}; it will end the process at once");
                }
            }
            i
        })
    }

    /// The signal received, once one has been.
    pub(crate) fn received(&self) -> Option<i32> {
        self.received.load(Ordering::SeqCst).then(|| self.signal.load(Ordering::SeqCst) as i32)
    }
}

/// The name of a stop signal.
pub(crate) fn name(signal: i32) -> &'static str {
    match signal {
        signal_hook::consts::SIGINT => "SIGINT",
        signal_hook::consts::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

static DRAINED: AtomicBool = AtomicBool::new(false);

/// Whether a query of this run was drained: the rest of the suite is not run.
pub(crate) fn drained() -> bool {
    DRAINED.load(Ordering::SeqCst)
}

/// Whether SIGUSR1 (drain) arrived since the last call (which then counts as the run being
/// drained); the handler is installed on first use.
pub(crate) fn drain_requested() -> bool {
    static DRAIN: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    DRAIN
        .get_or_init(|| {
            let flag = Arc::new(AtomicBool::new(false));
            if let Err(e) = signal_hook::flag::register(signal_hook::consts::SIGUSR1, flag.clone()) {
                tracing::warn!("cannot handle SIGUSR1 (drain): {e}");
            }
            flag
        })
        .swap(false, Ordering::SeqCst)
        && !DRAINED.swap(true, Ordering::SeqCst)
}
