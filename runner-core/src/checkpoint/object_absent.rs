//! A build without the `s3` feature: an `s3://` checkpoint location is refused, naming the
//! feature (see `object.rs`, the feature's implementation).

use weir_sdk::{Error, Result};

/// A prefix in an object store: none in this build, so no value of it exists.
pub enum ObjectLocation {}

impl ObjectLocation {
    /// Refuses: this build has no object store client.
    pub fn open(spec: &str, _bucket: &str, _prefix: &str) -> Result<Self> {
        Err(Error::Options(format!(
            "--checkpoint-dir {spec}: this build has no S3 checkpoints; they are the `s3` feature (on in the `weir` \
             crate's default features; `cargo build --release -p weir-nexmark --features s3` for the Nexmark \
             launcher)"
        )))
    }

    /// Never called: no value exists.
    pub fn name(&self, _: &str) -> String {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn put(&self, _: &str, _: Vec<u8>) -> Result<()> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn put_conditionally(&self, _: &str, _: Vec<u8>, _: Option<&str>) -> Result<Option<String>> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn get_tagged(&self, _: &str) -> Result<Option<(Vec<u8>, String)>> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn get_slice(&self, _: &str, _: u64, _: u64) -> Result<Option<Vec<u8>>> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn get(&self, _: &str) -> Result<Option<Vec<u8>>> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn list(&self, _: &str) -> Result<Vec<String>> {
        match *self {}
    }

    /// Never called: no value exists.
    pub fn delete_all(&self, _: &str) -> Result<()> {
        match *self {}
    }
}
