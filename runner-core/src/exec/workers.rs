//! The long-lived workers partitions run on: one pool per query, sized by the runner's
//! parallelism, instead of a new thread per partition per node per batch (which cost a
//! thread start and stop for every piece of work). Work is handed out with [`Workers::run`],
//! which returns the tasks' results in order. The calling thread works too: it runs the first
//! task while the pool's threads take the others, so `n` partitions keep `n` threads busy with
//! `n - 1` in the pool.
//!
//! The pool's threads block on their queues between units of work rather than spin looking
//! for it: a micro-batch engine hands out a short burst of tasks per node and then runs its
//! own bookkeeping, and threads that spin through that gap take the core the caller needs.
//! Tasks own what they work on (they are `'static`), so a task is a plain message to a thread.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use weir_sdk::{Error, Result};

type Job = Box<dyn FnOnce() + Send>;

/// A pool of worker threads.
pub struct Workers {
    queues: Vec<Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// Workers for `parallelism` tasks at a time: the caller and `parallelism - 1` threads named
    /// `name-<i>`; with a parallelism of one, work runs on the caller alone.
    pub fn new(name: &str, parallelism: usize) -> Result<Self> {
        let mut queues = Vec::new();
        let mut threads = Vec::new();
        for i in 0..parallelism.saturating_sub(1) {
            let (tx, rx) = channel::<Job>();
            let thread = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        job();
                    }
                })
                .map_err(|e| Error::Internal {
                    component: "workers".into(),
                    message: format!("cannot start worker thread {name}-{i}: {e}"),
                })?;
            queues.push(tx);
            threads.push(thread);
        }
        Ok(Workers { queues, threads })
    }

    /// How many tasks run at once: the caller and the pool's threads.
    pub fn threads(&self) -> usize {
        self.queues.len() + 1
    }

    /// Runs `f` on every task, in parallel when there are several, and returns the results in
    /// the tasks' order. A panic in `f` is resumed on the caller once every task has finished.
    pub fn run<T, R, F>(&self, tasks: Vec<T>, f: F) -> Vec<R>
    where
        T: Send + 'static,
        R: Send + 'static,
        F: Fn(T) -> R + Send + Sync + 'static,
    {
        if self.queues.is_empty() || tasks.len() <= 1 {
            return tasks.into_iter().map(f).collect();
        }
        let n = tasks.len();
        let f = Arc::new(f);
        let (done_tx, done_rx) = channel();
        let mut tasks = tasks.into_iter().enumerate();
        let first = tasks.next();
        for (i, t) in tasks {
            let (f, done) = (f.clone(), done_tx.clone());
            let job: Job = Box::new(move || {
                let r = catch_unwind(AssertUnwindSafe(|| f(t)));
                let _ = done.send((i, r));
            });
            if let Err(refused) = self.queues[(i - 1) % self.queues.len()].send(job) {
                // The thread is gone (it cannot be: jobs catch their panics); run it here.
                (refused.0)();
            }
        }
        drop(done_tx);
        let mut results: Vec<Option<std::thread::Result<R>>> = (0..n).map(|_| None).collect();
        if let Some((i, t)) = first {
            results[i] = Some(catch_unwind(AssertUnwindSafe(|| f(t))));
        }
        for (i, r) in done_rx.iter() {
            results[i] = Some(r);
        }
        let mut out = Vec::with_capacity(n);
        let mut panic = None;
        for r in results {
            match r.expect("every task reports back") {
                Ok(r) => out.push(r),
                Err(p) => {
                    panic.get_or_insert(p);
                }
            }
        }
        if let Some(p) = panic {
            resume_unwind(p);
        }
        out
    }

    /// [`Workers::run`] for work of the caller's step: the metrics container bound on the
    /// calling thread is bound on every task's thread too, so what the tasks' user code counts
    /// lands in the step's metrics.
    pub fn run_in_step<T, R, F>(&self, tasks: Vec<T>, f: F) -> Vec<R>
    where
        T: Send + 'static,
        R: Send + 'static,
        F: Fn(T) -> R + Send + Sync + 'static,
    {
        let metrics = weir_sdk::metrics::current_container();
        self.run(tasks, move |t| {
            let _scope = metrics.clone().map(weir_sdk::metrics::scoped_container);
            f(t)
        })
    }
}

/// [`Workers::run_in_step`] on `workers`, or on the calling thread alone without a pool (a
/// runner whose caller is already one of many, as a timely worker is).
pub fn run_in_step<T, R, F>(workers: Option<&Workers>, tasks: Vec<T>, f: F) -> Vec<R>
where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> R + Send + Sync + 'static,
{
    match workers {
        Some(w) => w.run_in_step(tasks, f),
        None => tasks.into_iter().map(f).collect(),
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        self.queues.clear();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    #[test]
    fn results_keep_the_order_of_the_tasks_and_threads_are_reused() {
        let workers = Workers::new("test", 3).unwrap();
        let names = Arc::new(Mutex::new(BTreeSet::new()));
        for round in 0..50 {
            let names = names.clone();
            let out = workers.run((0..8).collect(), move |i: i32| {
                names.lock().unwrap().insert(std::thread::current().name().unwrap_or("").to_string());
                i * round
            });
            assert_eq!(out, (0..8).map(|i| i * round).collect::<Vec<_>>());
        }
        // 400 tasks ran on the pool's two threads and the caller, not on a thread each.
        let names = names.lock().unwrap().clone();
        assert!(names.len() <= 3 && names.iter().any(|n| n.starts_with("test-")), "{names:?}");
        assert_eq!(Workers::new("one", 1).unwrap().run(vec![1, 2], |x| x + 1), vec![2, 3]);
    }

    #[test]
    fn a_panicking_task_reaches_the_caller_after_the_others_finish_and_the_pool_lives_on() {
        let workers = Workers::new("panics", 2).unwrap();
        let finished = Arc::new(Mutex::new(Vec::new()));
        let seen = finished.clone();
        let caught = catch_unwind(AssertUnwindSafe(|| {
            workers.run((0..4).collect(), move |i: i32| {
                if i == 1 {
                    panic!("task {i} failed");
                }
                seen.lock().unwrap().push(i);
            })
        }));
        let message = caught.unwrap_err().downcast::<String>().unwrap();
        assert_eq!(*message, "task 1 failed");
        let mut finished = finished.lock().unwrap().clone();
        finished.sort();
        assert_eq!(finished, vec![0, 2, 3]);
        assert_eq!(workers.run(vec![1, 2, 3], |x| x * 2), vec![2, 4, 6]);
    }
}
