//! The long-lived workers partitions run on: one pool per query, sized by the runner's
//! parallelism, instead of a new thread per partition per node per batch (which cost a
//! thread start and stop for every piece of work). Work is handed to the pool with
//! [`Workers::run`], which returns the tasks' results in order; a single task runs on the
//! calling thread.

use weir_sdk::{Error, Result};

/// A pool of worker threads.
pub struct Workers {
    pool: Option<rayon::ThreadPool>,
}

impl Workers {
    /// A pool of `threads` workers named `name-<i>`; with one thread, work runs on the caller.
    pub fn new(name: &str, threads: usize) -> Result<Self> {
        if threads <= 1 {
            return Ok(Workers { pool: None });
        }
        let prefix = name.to_string();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(move |i| format!("{prefix}-{i}"))
            .build()
            .map_err(|e| Error::Internal {
                component: "workers".into(),
                message: format!("cannot start workers: {e}"),
            })?;
        Ok(Workers { pool: Some(pool) })
    }

    /// Runs `f` on every task, in parallel on the workers when there are several, and returns
    /// the results in the tasks' order. A panic in `f` is resumed on the caller.
    pub fn run<T: Send, R: Send>(&self, tasks: Vec<T>, f: impl Fn(T) -> R + Sync + Send) -> Vec<R> {
        use rayon::prelude::*;
        match &self.pool {
            Some(pool) if tasks.len() > 1 => pool.install(|| tasks.into_par_iter().map(f).collect()),
            _ => tasks.into_iter().map(f).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_keep_the_order_of_the_tasks_and_threads_are_reused() {
        let workers = Workers::new("test", 3).unwrap();
        let names = std::sync::Mutex::new(std::collections::BTreeSet::new());
        for round in 0..50 {
            let out = workers.run((0..8).collect(), |i: i32| {
                names.lock().unwrap().insert(std::thread::current().name().unwrap_or("").to_string());
                i * round
            });
            assert_eq!(out, (0..8).map(|i| i * round).collect::<Vec<_>>());
        }
        // 400 tasks ran on the pool's three threads (or the caller), not on a thread each.
        let names = names.into_inner().unwrap();
        assert!(names.len() <= 4 && names.iter().any(|n| n.starts_with("test-")), "{names:?}");
        assert_eq!(Workers::new("one", 1).unwrap().run(vec![1, 2], |x| x + 1), vec![2, 3]);
    }
}
