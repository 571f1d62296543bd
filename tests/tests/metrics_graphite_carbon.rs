//! End to end against a real Graphite `carbon-cache` (Debian's `graphite-carbon`): the test
//! starts carbon on 127.0.0.1 with a temporary configuration (1-second retention), pipelines on
//! the direct and micro-batch runners push to it, and the values are read back from the whisper
//! files with `whisper-fetch`. Without carbon installed the test is skipped with a message,
//! except under CI (`CI` set), where it fails: `.ci/run` installs the package.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use weir_sdk::prelude::*;
use weir_tests::receivers::{free_port, installed, start, Receiver};

struct Carbon {
    receiver: Receiver,
    data: PathBuf,
}

fn start_carbon(dir: &Path) -> Option<Carbon> {
    if !installed("carbon-cache", "graphite-carbon python3-whisper") {
        return None;
    }
    let (port, pickle, query) = (free_port(), free_port(), free_port());
    let data = dir.join("whisper");
    for d in ["whisper", "log", "run"] {
        std::fs::create_dir_all(dir.join(d)).unwrap();
    }
    std::fs::write(
        dir.join("carbon.conf"),
        format!(
            "[cache]\nSTORAGE_DIR = {d}/\nLOCAL_DATA_DIR = {d}/whisper/\nWHITELISTS_DIR = {d}/\nCONF_DIR = {d}/\nLOG_DIR = {d}/log/\nPID_DIR = {d}/run/\n\
             ENABLE_LOGROTATION = False\nUSER =\nMAX_CACHE_SIZE = inf\nMAX_UPDATES_PER_SECOND = inf\nMAX_CREATES_PER_MINUTE = inf\n\
             LINE_RECEIVER_INTERFACE = 127.0.0.1\nLINE_RECEIVER_PORT = {port}\nENABLE_UDP_LISTENER = False\n\
             PICKLE_RECEIVER_INTERFACE = 127.0.0.1\nPICKLE_RECEIVER_PORT = {pickle}\nCACHE_QUERY_INTERFACE = 127.0.0.1\nCACHE_QUERY_PORT = {query}\n\
             LOG_LISTENER_CONNECTIONS = False\nLOG_UPDATES = False\nLOG_CACHE_HITS = False\nWHISPER_AUTOFLUSH = True\n",
            d = dir.display()
        ),
    )
    .unwrap();
    std::fs::write(dir.join("storage-schemas.conf"), "[default]\npattern = .*\nretentions = 1s:1h\n").unwrap();
    let args = [format!("--config={}", dir.join("carbon.conf").display()), "--debug".into(), "start".into()];
    let receiver = start("carbon-cache", &args, port, &dir.join("log/stdout.txt"));
    Some(Carbon { receiver, data })
}

use weir_tests::Measured;

/// The newest non-empty value of a whisper file, polled until it is `expected` or time runs out.
fn read_back(file: &Path, expected: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut last = f64::NAN;
    loop {
        if file.exists() {
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
            let out = Command::new("whisper-fetch")
                .arg(format!("--from={}", now - 600))
                .arg(file)
                .output()
                .expect("whisper-fetch");
            let text = String::from_utf8_lossy(&out.stdout);
            if let Some(v) = text
                .lines()
                .rev()
                .filter_map(|l| l.split('\t').nth(1))
                .filter(|v| *v != "None")
                .find_map(|v| v.parse().ok())
            {
                last = v;
                if v == expected {
                    return v;
                }
            }
        }
        assert!(Instant::now() < deadline, "{} never reached {expected} (last {last})", file.display());
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn pushes_to_a_real_carbon_cache_from_both_runners() {
    let dir = tempfile::tempdir().unwrap();
    let Some(carbon) = start_carbon(dir.path()) else { return };
    weir_tests::register_runners();
    for (config, step) in [("direct_unshuffled", "Direct"), ("microbatch_p1", "Micro")] {
        let options = weir_tests::with_metrics_flags(
            config,
            &[
                "--metrics-sink",
                "graphite",
                "--metrics-graphite-host",
                "127.0.0.1",
                "--metrics-graphite-port",
                &carbon.receiver.port.to_string(),
                "--metrics-push-period",
                "1",
            ],
        );
        let p = TestPipeline::from_options(options);
        p.apply("Create", Create::of(1..=4i64)).apply(step, ParDo::of(Measured));
        assert_eq!(p.try_run().unwrap(), PipelineState::Done);
        let base = carbon.data.join("beam");
        assert_eq!(read_back(&base.join(format!("counter/test/elements/{step}/attempted/value.wsp")), 4.0), 4.0);
        assert_eq!(read_back(&base.join(format!("counter/test/elements/{step}/committed/value.wsp")), 4.0), 4.0);
        assert_eq!(read_back(&base.join(format!("distribution/test/values/{step}/attempted/sum.wsp")), 10.0), 10.0);
        assert_eq!(read_back(&base.join(format!("distribution/test/values/{step}/attempted/mean.wsp")), 2.5), 2.5);
        assert_eq!(read_back(&base.join(format!("gauge/test/last/{step}/attempted/value.wsp")), 7.0), 7.0);
    }
}
