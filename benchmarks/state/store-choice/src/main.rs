//! Measures an embedded key-value store on the access pattern of Weir's disk state backend:
//! cold key states spilled in write batches, faulted back (read, then removed) when their key is
//! touched again, lookups of keys never spilled (a key's first element), and one ordered scan
//! (a bounded GroupByKey firing every key at the end of its input).
//!
//! `cargo run --release --features fjall -- DIR [KEYS]` or `--features rocksdb`; prints one
//! JSON line of seconds per phase, bytes on disk and peak resident memory.

use std::path::Path;
use std::time::Instant;

/// A store under test.
trait Store {
    fn put_batch(&mut self, kvs: &[(Vec<u8>, Vec<u8>)]);
    fn get(&mut self, k: &[u8]) -> Option<usize>;
    fn remove(&mut self, k: &[u8]);
    fn scan(&mut self) -> (usize, usize);
    fn flush(&mut self);
}

#[cfg(feature = "fjall")]
mod store {
    use fjall::{Database, Keyspace, KeyspaceCreateOptions};
    pub struct S {
        db: Database,
        ks: Keyspace,
    }
    pub const NAME: &str = "fjall";
    pub fn open(dir: &std::path::Path) -> S {
        let db = Database::builder(dir)
            .manual_journal_persist(true)
            .cache_size(64 << 20)
            .open()
            .expect("open");
        let ks = db.keyspace("state", KeyspaceCreateOptions::default).expect("keyspace");
        S { db, ks }
    }
    impl super::Store for S {
        fn put_batch(&mut self, kvs: &[(Vec<u8>, Vec<u8>)]) {
            let mut b = self.db.batch();
            for (k, v) in kvs {
                b.insert(&self.ks, k.as_slice(), v.as_slice());
            }
            b.commit().expect("commit");
        }
        fn get(&mut self, k: &[u8]) -> Option<usize> {
            self.ks.get(k).expect("get").map(|v| v.len())
        }
        fn remove(&mut self, k: &[u8]) {
            self.ks.remove(k).expect("remove");
        }
        fn scan(&mut self) -> (usize, usize) {
            let (mut n, mut bytes) = (0, 0);
            for kv in self.ks.iter() {
                let (_, v) = kv.into_inner().expect("iter");
                n += 1;
                bytes += v.len();
            }
            (n, bytes)
        }
        fn flush(&mut self) {
            self.ks.rotate_memtable_and_wait().expect("flush");
        }
    }
}

#[cfg(feature = "rocksdb")]
mod store {
    use rocksdb::{BlockBasedOptions, Cache, Options, WriteBatch, WriteOptions, DB};
    pub struct S {
        db: DB,
        wo: WriteOptions,
    }
    pub const NAME: &str = "rocksdb";
    pub fn open(dir: &std::path::Path) -> S {
        let mut o = Options::default();
        o.create_if_missing(true);
        o.set_compression_type(rocksdb::DBCompressionType::Lz4);
        let mut t = BlockBasedOptions::default();
        t.set_block_cache(&Cache::new_lru_cache(64 << 20));
        t.set_bloom_filter(10.0, false);
        o.set_block_based_table_factory(&t);
        let db = DB::open(&o, dir).expect("open");
        let mut wo = WriteOptions::default();
        wo.disable_wal(true);
        S { db, wo }
    }
    impl super::Store for S {
        fn put_batch(&mut self, kvs: &[(Vec<u8>, Vec<u8>)]) {
            let mut b = WriteBatch::default();
            for (k, v) in kvs {
                b.put(k, v);
            }
            self.db.write_opt(b, &self.wo).expect("write");
        }
        fn get(&mut self, k: &[u8]) -> Option<usize> {
            self.db.get_pinned(k).expect("get").map(|v| v.len())
        }
        fn remove(&mut self, k: &[u8]) {
            self.db.delete_opt(k, &self.wo).expect("delete");
        }
        fn scan(&mut self) -> (usize, usize) {
            let (mut n, mut bytes) = (0, 0);
            for kv in self.db.iterator(rocksdb::IteratorMode::Start) {
                let (_, v) = kv.expect("iter");
                n += 1;
                bytes += v.len();
            }
            (n, bytes)
        }
        fn flush(&mut self) {
            self.db.flush().expect("flush");
        }
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn key(i: u64) -> Vec<u8> {
    // A step's prefix, then the encoded key (a hashed auction id, as Weir spreads keys).
    let mut k = b"step/0003/".to_vec();
    k.extend_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes());
    k
}

/// A key's encoded state: a buffer of encoded bids (varints and short strings, which
/// compress about as well as Weir's own encodings).
fn value(rng: &mut Rng) -> Vec<u8> {
    let n = 100 + (rng.next() % 400) as usize;
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        let x = rng.next();
        v.extend_from_slice(&(x % 10_000).to_le_bytes()[..3]);
        v.extend_from_slice(b"channel-");
        v.push(b'0' + (x % 10) as u8);
    }
    v
}

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l.split_whitespace().nth(1).unwrap_or("0").parse().unwrap_or(0)))
        .unwrap_or(0)
}

fn dir_bytes(p: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(p) {
        for e in rd.flatten() {
            let m = match e.metadata() {
                Ok(m) => m,
                Err(_) => continue,
            };
            total += if m.is_dir() { dir_bytes(&e.path()) } else { m.len() };
        }
    }
    total
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dir = Path::new(args.get(1).map(String::as_str).unwrap_or("/tmp/store-choice"));
    let keys: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2_000_000);
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("dir");
    let mut s = store::open(dir);
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut phases = Vec::new();

    // Spill: every key's state, in batches of 10,000 (one eviction pass each).
    let t = Instant::now();
    let mut written = 0u64;
    let mut batch = Vec::with_capacity(10_000);
    for i in 0..keys {
        let v = value(&mut rng);
        written += v.len() as u64;
        batch.push((key(i), v));
        if batch.len() == 10_000 {
            s.put_batch(&batch);
            batch.clear();
        }
    }
    s.put_batch(&batch);
    s.flush();
    phases.push(("spill", t.elapsed().as_secs_f64()));

    // Fault: a quarter of the keys touched again: read back, removed (now in memory), and
    // spilled again later with a grown value.
    let t = Instant::now();
    let mut back = Vec::with_capacity(10_000);
    for _ in 0..keys / 4 {
        let i = rng.next() % keys;
        let k = key(i);
        if s.get(&k).is_some() {
            s.remove(&k);
            back.push((k, value(&mut rng)));
        }
        if back.len() == 10_000 {
            s.put_batch(&back);
            back.clear();
        }
    }
    s.put_batch(&back);
    phases.push(("fault", t.elapsed().as_secs_f64()));

    // Miss: lookups of keys never spilled (every new key's first element).
    let t = Instant::now();
    let mut found = 0;
    for i in 0..keys / 4 {
        found += s.get(&key(keys + i)).is_some() as u64;
    }
    assert_eq!(found, 0);
    phases.push(("miss", t.elapsed().as_secs_f64()));

    // Scan: every key in order, as a bounded GroupByKey fires at the end of its input.
    let t = Instant::now();
    let (n, bytes) = s.scan();
    phases.push(("scan", t.elapsed().as_secs_f64()));
    s.flush();
    let disk = dir_bytes(dir);
    let body: Vec<String> = phases.iter().map(|(p, t)| format!("\"{p}_s\":{t:.3}")).collect();
    println!(
        "{{\"store\":\"{}\",\"keys\":{keys},\"value_bytes\":{written},\"scanned\":{n},\"scanned_bytes\":{bytes},\"disk_bytes\":{disk},\"peak_rss_mb\":{},{}}}",
        store::NAME,
        peak_rss_kb() / 1024,
        body.join(",")
    );
}
