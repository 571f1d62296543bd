//! The long-lived workers partitions run on: one pool per query, sized by the runner's
//! parallelism, instead of a new thread per partition per node per batch (which cost a
//! thread start and stop for every piece of work). Work is handed out with [`Workers::run`],
//! which returns the tasks' results in order. The calling thread works too: it runs the first
//! task while the pool's threads take the others, so `n` partitions keep `n` threads busy with
//! `n - 1` in the pool, and nothing waits idle for a thread to wake.

use std::sync::{Mutex, MutexGuard};
use weir_sdk::{Error, Result};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pool of worker threads.
pub struct Workers {
    pool: Option<rayon::ThreadPool>,
}

impl Workers {
    /// Workers for `parallelism` tasks at a time: the caller and `parallelism - 1` threads named
    /// `name-<i>`; with a parallelism of one, work runs on the caller alone.
    pub fn new(name: &str, parallelism: usize) -> Result<Self> {
        if parallelism <= 1 {
            return Ok(Workers { pool: None });
        }
        let prefix = name.to_string();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(parallelism - 1)
            .thread_name(move |i| format!("{prefix}-{i}"))
            .build()
            .map_err(|e| Error::Internal {
                component: "workers".into(),
                message: format!("cannot start workers: {e}"),
            })?;
        Ok(Workers { pool: Some(pool) })
    }

    /// Runs `f` on every task, in parallel when there are several, and returns the results in
    /// the tasks' order. A panic in `f` is resumed on the caller.
    pub fn run<T: Send, R: Send>(&self, tasks: Vec<T>, f: impl Fn(T) -> R + Sync + Send) -> Vec<R> {
        let pool = match &self.pool {
            Some(pool) if tasks.len() > 1 => pool,
            _ => return tasks.into_iter().map(f).collect(),
        };
        let results: Vec<Mutex<Option<R>>> = tasks.iter().map(|_| Mutex::new(None)).collect();
        let mut tasks = tasks.into_iter().enumerate();
        let first = tasks.next();
        pool.in_place_scope(|s| {
            for (i, t) in tasks {
                let (f, results) = (&f, &results);
                s.spawn(move |_| *lock(&results[i]) = Some(f(t)));
            }
            if let Some((i, t)) = first {
                *lock(&results[i]) = Some(f(t));
            }
        });
        results
            .into_iter()
            .map(|r| r.into_inner().unwrap_or_else(|e| e.into_inner()))
            .map(|r| r.expect("every task ran"))
            .collect()
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
        // 400 tasks ran on the pool's two threads and the caller, not on a thread each.
        let names = names.into_inner().unwrap();
        assert!(names.len() <= 3 && names.iter().any(|n| n.starts_with("test-")), "{names:?}");
        assert_eq!(Workers::new("one", 1).unwrap().run(vec![1, 2], |x| x + 1), vec![2, 3]);
    }
}
