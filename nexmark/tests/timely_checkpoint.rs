//! Exactly-once across processes: a checkpointed streaming Nexmark run on a local cluster of two
//! timely processes, SIGKILLed at random points (either process), restarted each time with the
//! same checkpoint, ends with exactly the output of an uninterrupted run. The same holds with
//! the checkpoint in S3 (a moto server started here on 127.0.0.1), and damaged or mismatched
//! checkpoints are refused with the file named. The micro-batch runner keeps its checkpoint in S3
//! through the same protocol, and is tested here on the same server.

mod common;
use common::{children, differences, nexmark, results, text};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The query and its flags: q3 (a stateful join across workers) over both generators.
fn args(results: &Path, extra: &[&str]) -> Vec<String> {
    query_args("3", results, extra)
}

/// Query `q`'s flags.
fn query_args(q: &str, results: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "--runner",
        "timely",
        "--processes",
        "2",
        "--streaming",
        "--query",
        q,
        "--num-events",
        "300000",
        "--num-event-generators",
        "2",
        "--max-batch-size",
        "4000",
        "--results",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    a.push(results.display().to_string());
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn sigkill(pid: u32) {
    let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
}

/// Runs the checkpointed query `kills` times, SIGKILLing one of its two processes at a random
/// point of each run (chosen by `seed`), then to the end; returns how many runs were killed.
fn run_with_kills(args: &[String], env: &[(&str, String)], kills: usize, mut seed: u64) -> usize {
    let mut killed = 0;
    while killed < kills {
        let mut run: Child = nexmark(args, env).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let wait = Duration::from_millis(300 + (seed >> 33) % 1500);
        // Two kills in three hit the second process, the others the first (whose child then
        // stops on its own, having lost its parent).
        let child_first = !(seed >> 20).is_multiple_of(3);
        let start = Instant::now();
        loop {
            if let Some(status) = run.try_wait().unwrap() {
                let mut err = String::new();
                std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
                assert!(status.success(), "a run failed on its own: {err}");
                // It finished before the kill: the job is done.
                return killed;
            }
            if start.elapsed() >= wait {
                let second = children(run.id()).first().copied();
                match second {
                    Some(c) if child_first => sigkill(c),
                    _ => sigkill(run.id()),
                }
                let status = run.wait().unwrap();
                let mut err = String::new();
                std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
                if status.success() {
                    // The kill landed as the run was ending (the process killed had done its
                    // part): the job is done, and the caller checks its output.
                    return killed;
                }
                if second.is_some() && child_first {
                    // The survivor stops within seconds, naming the lost process.
                    assert!(err.contains("lost process 1 of the cluster"), "{err}");
                }
                killed += 1;
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let o = nexmark(args, env).output().unwrap();
    assert!(o.status.success(), "the last run: {}", text(&o));
    killed
}

/// The uninterrupted run's output of query `q`.
fn reference(dir: &Path, q: &str) -> BTreeMap<String, usize> {
    let out = dir.join("reference");
    let o = nexmark(&query_args(q, &out, &[]), &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let r = results(&out);
    assert!(r.len() > 1000, "too small a reference: {} lines", r.len());
    r
}

#[test]
fn twenty_random_kills_of_either_process_recover_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let expected = reference(dir.path(), "3");
    let out = dir.path().join("out");
    let cp = dir.path().join("cp");
    let a = args(&out, &["--checkpoint-dir", cp.to_str().unwrap()]);
    // Runs that finish before their kill start over, until 20 kills have landed.
    let mut kills = 0;
    let mut seed = 0x5eed_7173;
    while kills < 20 {
        kills += run_with_kills(&a, &[], 20 - kills, seed);
        let got = results(&out);
        assert!(got == expected, "after {kills} kills: {:#?}", differences(&expected, &got));
        std::fs::remove_dir_all(&cp).unwrap();
        std::fs::remove_dir_all(&out).unwrap();
        seed += 1;
    }
}

/// Issue 52: on a cluster, commits write deltas, each worker folds its own into snapshots in the
/// background, and the commits name every worker's latest; a killed run resumes from them, and
/// the epochs before the earliest are retired.
#[test]
fn background_snapshots_of_every_worker_are_resumed_from() {
    let dir = tempfile::tempdir().unwrap();
    let expected = reference(dir.path(), "3");
    let (out, cp) = (dir.path().join("out"), dir.path().join("cp"));
    let flags =
        ["--checkpoint-dir", cp.to_str().unwrap(), "--state-snapshot-interval", "3", "--min-batches-to-retain", "1"];
    let a = args(&out, &flags);
    run_with_kills(&a, &[], 2, 0x5a9);
    assert!(results(&out) == expected, "{:#?}", differences(&expected, &results(&out)));
    let mut kept: Vec<u64> = std::fs::read_dir(cp.join("state"))
        .unwrap()
        .flatten()
        .filter_map(|d| d.file_name().to_str()?.parse().ok())
        .collect();
    kept.sort_unstable();
    assert!(kept.len() > 1 && kept[0] > 0, "nothing retired: {kept:?}");
    let workers = std::fs::read_dir(cp.join("state").join(kept[0].to_string())).unwrap().count();
    for w in 0..workers {
        let made = kept.iter().filter(|e| cp.join(format!("state/{e}/{w}/snapshot.json")).exists()).count();
        assert!(made > 0, "worker {w} has no background snapshot in {kept:?}");
    }
}

/// Damage of every kind is refused with the file named, before anything runs.
#[test]
fn damaged_or_mismatched_checkpoints_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cp = dir.path().join("cp");
    let run = |out: &str, extra: &[&str]| {
        let mut e = vec!["--checkpoint-dir", cp.to_str().unwrap(), "--state-snapshot-interval", "100"];
        e.extend(extra);
        let mut a = args(&dir.path().join(out), &e);
        let at = a.iter().position(|x| x == "300000").unwrap();
        a[at] = "40000".into();
        nexmark(&a, &[]).output().unwrap()
    };
    let first = run("out", &[]);
    assert!(first.status.success(), "{}", text(&first));
    let commits: Vec<u64> = std::fs::read_dir(cp.join("commits"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect();
    let last = *commits.iter().max().unwrap();
    assert!(commits.len() >= 2, "{commits:?}");
    let refused = |o: &Output, needles: &[&str]| {
        assert!(!o.status.success(), "not refused");
        let t = text(o);
        for n in needles {
            assert!(t.contains(n), "missing '{n}' in: {t}");
        }
    };
    // Another pipeline (q5 has other transforms) is refused, naming the difference.
    let mut other = args(&dir.path().join("other"), &["--checkpoint-dir", cp.to_str().unwrap()]);
    let q = other.iter().position(|x| x == "3").unwrap();
    other[q] = "5".into();
    let o = nexmark(&other, &[]).output().unwrap();
    refused(&o, &["written by a different pipeline"]);
    // A damaged manifest of the last commit's state is named.
    let manifest = cp.join(format!("state/{last}/1/manifest.json"));
    let good = std::fs::read(&manifest).unwrap();
    std::fs::write(&manifest, b"{\"version\":1,\"crc32\":0,\"body\":\"{}\"}").unwrap();
    refused(&run("out", &[]), &[manifest.to_str().unwrap(), "checksum mismatch"]);
    std::fs::write(&manifest, &good).unwrap();
    // A worker's missing offsets of the last commit are named.
    let offsets = cp.join(format!("offsets/{last}/0"));
    let good = std::fs::read(&offsets).unwrap();
    std::fs::remove_file(&offsets).unwrap();
    refused(&run("out", &[]), &[offsets.to_str().unwrap(), "missing"]);
    std::fs::write(&offsets, &good).unwrap();
    // A hole in the commits is named.
    let first_commit = *commits.iter().min().unwrap();
    let hole = cp.join(format!("commits/{}", first_commit + 1));
    let good = std::fs::read(&hole).unwrap();
    std::fs::remove_file(&hole).unwrap();
    refused(&run("out", &[]), &[hole.to_str().unwrap(), "hole"]);
    std::fs::write(&hole, &good).unwrap();
    // Log entries without metadata cannot be checked against the pipeline.
    let meta = cp.join("metadata.json");
    let good = std::fs::read(&meta).unwrap();
    std::fs::remove_file(&meta).unwrap();
    refused(&run("out", &[]), &[meta.to_str().unwrap(), "missing"]);
    std::fs::write(&meta, &good).unwrap();
    // Restored, it resumes (the run is complete: nothing is added).
    let before = results(&dir.path().join("out"));
    let again = run("out", &[]);
    assert!(again.status.success(), "{}", text(&again));
    assert_eq!(results(&dir.path().join("out")), before);
}

/// A moto S3 server on a free port of 127.0.0.1, with bucket `weir`; stopped on drop.
struct Moto {
    child: Child,
    endpoint: String,
}

impl Moto {
    fn start() -> Moto {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server (PyPI moto[server]) must be installed: pip install 'moto[server]'");
        let endpoint = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        // The bucket, created with a plain PUT once the server answers.
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                use std::io::{Read, Write};
                let req = format!(
                    "PUT /weir HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                s.write_all(req.as_bytes()).unwrap();
                let mut resp = String::new();
                let _ = s.read_to_string(&mut resp);
                if resp.starts_with("HTTP/1.1 200") || resp.starts_with("HTTP/1.0 200") {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "moto_server did not start on port {port}");
            std::thread::sleep(Duration::from_millis(100));
        }
        Moto { child, endpoint }
    }

    fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    /// Replaces the object at `key` of bucket `weir`, with boto3 (which moto brings).
    fn put(&self, key: &str, body: &str) {
        let script = format!(
            "import boto3; boto3.client('s3', endpoint_url='{}', aws_access_key_id='test', \
             aws_secret_access_key='test', region_name='us-east-1').put_object(Bucket='weir', Key='{key}', Body={body:?})",
            self.endpoint
        );
        let o = Command::new("python3").args(["-c", &script]).output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn s3_checkpoints_recover_exactly_once_and_are_checked() {
    let moto = Moto::start();
    let env = moto.env();
    let dir = tempfile::tempdir().unwrap();
    // q8: windowed joins of two aggregations, another kind of state than q3's.
    let expected = reference(dir.path(), "8");
    let out = dir.path().join("out");
    let a = query_args("8", &out, &["--checkpoint-dir", "s3://weir/q8"]);
    let kills = run_with_kills(&a, &env, 4, 0x53);
    assert!(kills > 0, "no run was killed");
    let got = results(&out);
    assert!(got == expected, "after {kills} kills: {:#?}", differences(&expected, &got));
    // Nothing was written locally under the URL's name.
    assert!(!Path::new("s3:").exists());
    // Another pipeline is refused, naming the URL.
    let other = query_args("5", &dir.path().join("other"), &["--checkpoint-dir", "s3://weir/q8"]);
    let o = nexmark(&other, &env).output().unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("s3://weir/q8") && text(&o).contains("different pipeline"), "{}", text(&o));
    // A damaged metadata object is named by its URL.
    moto.put("q8/metadata.json", "not json");
    let o = nexmark(&a, &env).output().unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("s3://weir/q8/metadata.json"), "{}", text(&o));
    // An unreachable store is an error naming it, not a hang.
    let mut gone = env.clone();
    gone[0].1 = "http://127.0.0.1:9".into();
    let t = Instant::now();
    let o = nexmark(&args(&dir.path().join("gone"), &["--checkpoint-dir", "s3://weir/x"]), &gone).output().unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("s3://weir/x"), "{}", text(&o));
    assert!(t.elapsed() < Duration::from_secs(60), "took {:?}", t.elapsed());
}

/// Issue 33: two clusters started on one `s3://` checkpoint. The first holds each process's
/// lease (a conditional create, renewed while it runs); the second is refused, naming the
/// holder, instead of taking over the first one's commits; the first ends with all its output.
#[test]
fn a_second_cluster_on_one_s3_checkpoint_is_refused() {
    let moto = Moto::start();
    let env = moto.env();
    let dir = tempfile::tempdir().unwrap();
    let paced = ["--num-events", "100000", "--first-event-rate", "5000", "--next-event-rate", "5000"];
    let reference_out = dir.path().join("reference");
    let o = nexmark(&query_args("2", &reference_out, &paced), &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let expected = results(&reference_out);
    // About 20 s of events, paced (q2 is a selection: its results do not depend on the pace).
    let mut flags = paced.to_vec();
    flags.extend(["--is-rate-limited", "--checkpoint-dir", "s3://weir/two"]);
    let out = dir.path().join("out");
    let first =
        nexmark(&query_args("2", &out, &flags), &env).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let second = nexmark(&query_args("2", &dir.path().join("second"), &flags), &env).output().unwrap();
    assert!(!second.status.success(), "the second cluster ran: {}", text(&second));
    let t = text(&second);
    assert!(t.contains("s3://weir/two") && t.contains(&format!("leased by pid {}", first.id())), "{t}");
    let o = first.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = results(&out);
    let missing = expected.keys().filter(|k| !got.contains_key(*k)).count();
    let extra = got.iter().filter(|(k, n)| expected.get(*k) != Some(n)).count();
    assert_eq!((got.len(), missing, extra), (expected.len(), 0, 0), "results of the first cluster");
    assert!(results(&dir.path().join("second")).is_empty(), "the second cluster wrote output");
}

/// An error in one process (here its checkpoint cannot be written) stops the whole cluster
/// with that error, rather than leaving the others waiting for the failed one.
#[test]
fn an_error_in_one_process_stops_the_cluster_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let cp = dir.path().join("cp");
    // Worker 1's state folder of epoch 3 is taken by a file.
    std::fs::create_dir_all(cp.join("state/3")).unwrap();
    std::fs::write(cp.join("state/3/1"), "in the way").unwrap();
    let mut a = args(&dir.path().join("out"), &["--checkpoint-dir", cp.to_str().unwrap()]);
    let at = a.iter().position(|x| x == "300000").unwrap();
    a[at] = "40000".into();
    let o = nexmark(&a, &[]).output().unwrap();
    assert!(!o.status.success());
    let t = text(&o);
    assert!(t.contains("process 1 failed (worker 1)") && t.contains("state/3/1"), "{t}");
}

/// `args` of a timely cluster of two processes, as a micro-batch run of two partitions.
fn on_micro_batch(args: Vec<String>) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "timely" => out.push("microbatch".into()),
            "--processes" => {
                it.next();
                out.extend(["--parallelism".to_string(), "2".to_string()]);
            }
            _ => out.push(a),
        }
    }
    out
}

/// The micro-batch runner keeps its checkpoint in S3 as timely does (one protocol): SIGKILLed at
/// random points and restarted, it ends with exactly the output of an uninterrupted run, writes
/// nothing locally under the URL's name, and refuses another pipeline naming the URL.
#[test]
fn micro_batch_s3_checkpoints_recover_exactly_once() {
    let moto = Moto::start();
    let env = moto.env();
    let dir = tempfile::tempdir().unwrap();
    let reference_out = dir.path().join("reference");
    let o = nexmark(&on_micro_batch(query_args("8", &reference_out, &[])), &[]).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let expected = results(&reference_out);
    assert!(expected.len() > 1000, "too small a reference: {} lines", expected.len());
    let out = dir.path().join("out");
    let a = on_micro_batch(query_args("8", &out, &["--checkpoint-dir", "s3://weir/mb8"]));
    let kills = run_with_kills(&a, &env, 4, 0x3b);
    assert!(kills > 0, "no run was killed");
    let got = results(&out);
    assert!(got == expected, "after {kills} kills: {:#?}", differences(&expected, &got));
    assert!(!Path::new("s3:").exists());
    let other = on_micro_batch(query_args("5", &dir.path().join("other"), &["--checkpoint-dir", "s3://weir/mb8"]));
    let o = nexmark(&other, &env).output().unwrap();
    assert!(!o.status.success());
    assert!(text(&o).contains("s3://weir/mb8") && text(&o).contains("different pipeline"), "{}", text(&o));
}
