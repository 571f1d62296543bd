//! The timely runner's flags: workers per process, processes and where they are.
//!
//! An epoch is a micro-batch, so batch sizes, the trigger and the checkpoint are runner-core's
//! streaming options (`--max-batch-size`, `--trigger`, `--trigger-interval-ms`,
//! `--checkpoint-dir`), which the micro-batch runner reads too.

use weir_sdk::{Error, Result};

/// Options of the timely runner, with timely's conventions.
#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct TimelyOptions {
    /// Worker threads per process.
    #[arg(long = "workers", default_value_t = 1, value_parser = weir_sdk::options::count_within(1, 1024))]
    pub workers: usize,
    /// Processes in the cluster.
    #[arg(long = "processes", default_value_t = 1, value_parser = weir_sdk::options::count_within(1, 1024))]
    pub processes: usize,
    /// This process's index in the cluster, from 0.
    #[arg(long = "process-id", default_value_t = 0, value_parser = weir_sdk::options::count_within(0, 1023))]
    pub process_id: usize,
    /// A file naming every process's address, one `host:port` per line, in process order.
    /// Without it, `--processes N > 1` starts a local cluster of N processes on 127.0.0.1.
    #[arg(long = "hostfile", value_parser = weir_sdk::options::non_empty())]
    pub hostfile: Option<String>,
    /// Seconds without a word from another process of the cluster (its heartbeat, sent twice a
    /// second whatever its workers are doing) before it is taken for lost and the run fails,
    /// naming it: a process stopped (SIGSTOP), hung, or cut off by the network, whose
    /// connections stay open.
    #[arg(long = "peer-timeout", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub peer_timeout_secs: u64,
    /// The addresses of a local cluster (set by the launcher, not a flag).
    #[arg(skip)]
    pub(crate) local_addresses: Option<Vec<String>>,
}

impl Default for TimelyOptions {
    fn default() -> Self {
        TimelyOptions {
            workers: 1,
            processes: 1,
            process_id: 0,
            hostfile: None,
            peer_timeout_secs: 10,
            local_addresses: None,
        }
    }
}

impl TimelyOptions {
    /// Every worker in the cluster.
    pub fn peers(&self) -> usize {
        self.workers.max(1) * self.processes.max(1)
    }

    /// Checks the flags against each other.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::Options(m));
        if self.workers == 0 {
            return bad("--workers must be at least 1".into());
        }
        if self.processes == 0 {
            return bad("--processes must be at least 1".into());
        }
        if self.process_id >= self.processes {
            return bad(format!("--process-id {} is not below --processes {}", self.process_id, self.processes));
        }
        Ok(())
    }

    /// The addresses of the cluster's processes from `--hostfile`: one `host:port` per line
    /// (blank lines and `#` comments skipped), exactly `--processes` of them.
    pub fn addresses(&self) -> Result<Option<Vec<String>>> {
        if let Some(local) = &self.local_addresses {
            return Ok(Some(local.clone()));
        }
        let Some(path) = &self.hostfile else { return Ok(None) };
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Options(format!("--hostfile {path}: cannot read it: {e}")))?;
        let mut out = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let ok = line.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                return Err(Error::Options(format!("--hostfile {path}, line {}: '{line}' is not host:port", n + 1)));
            }
            out.push(line.to_string());
        }
        if out.len() != self.processes {
            return Err(Error::Options(format!(
                "--hostfile {path} names {} processes, but --processes is {}",
                out.len(),
                self.processes
            )));
        }
        Ok(Some(out))
    }
}
