//! Checkpoints in an object store (`s3://bucket/prefix`), for [`super::store::Location`]: the
//! `s3` feature. Without it (`object_absent.rs`), an `s3://` location is refused naming the
//! feature, and nothing of the S3 client (object_store, reqwest, rustls, tokio) is compiled.

use super::log::io;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use std::sync::Arc;
use std::time::Duration;
use weir_sdk::{Error, Result};

/// A prefix in an object store, with the runtime its client runs on.
pub struct ObjectLocation {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    runtime: tokio::runtime::Runtime,
}

impl ObjectLocation {
    /// The prefix `prefix` of bucket `bucket`, as `spec` (the whole URL) names it.
    pub fn open(spec: &str, bucket: &str, prefix: &str) -> Result<Self> {
        // TLS through rustls needs a process-wide crypto provider; ring is the one built in.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let retry =
            object_store::RetryConfig { max_retries: 3, retry_timeout: Duration::from_secs(15), ..Default::default() };
        use object_store::aws::AmazonS3ConfigKey::Client;
        use object_store::ClientConfigKey::{ConnectTimeout, Timeout};
        // Timeouts go in as settings: replacing the client options would drop the ones the
        // environment gave (AWS_ALLOW_HTTP among them).
        let store = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_retry(retry)
            .with_config(Client(ConnectTimeout), "5s")
            .with_config(Client(Timeout), "30s")
            .build()
            .map_err(|e| Error::Options(format!("--checkpoint-dir {spec}: {e}")))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| io(spec, format!("cannot start the object store client: {e}")))?;
        let prefix = ObjectPath::parse(prefix.trim_end_matches('/'))
            .map_err(|e| Error::Options(format!("--checkpoint-dir {spec}: {e}")))?;
        let url = format!("s3://{bucket}/{}", prefix.as_ref());
        Ok(ObjectLocation { url, store: Arc::new(store), prefix, runtime })
    }

    /// How `key` is named in messages: its URL.
    pub fn name(&self, key: &str) -> String {
        match key.is_empty() {
            true => self.url.clone(),
            false => format!("{}/{key}", self.url.trim_end_matches('/')),
        }
    }

    fn path(&self, key: &str) -> ObjectPath {
        let mut p = self.prefix.clone();
        for part in key.split('/').filter(|s| !s.is_empty()) {
            p = p.clone().join(part);
        }
        p
    }

    /// Writes `bytes` at `key` (an object is written whole).
    pub fn put(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        let path = self.path(key);
        self.runtime.block_on(self.store.put(&path, bytes.into())).map_err(|e| io(&self.name(key), e))?;
        Ok(())
    }

    /// See [`super::store::Location::put_conditionally`].
    pub fn put_conditionally(&self, key: &str, bytes: Vec<u8>, replacing: Option<&str>) -> Result<Option<String>> {
        let path = self.path(key);
        let mode = match replacing {
            None => object_store::PutMode::Create,
            Some(tag) => object_store::PutMode::Update(object_store::UpdateVersion {
                e_tag: Some(tag.to_string()),
                version: None,
            }),
        };
        let put = self.store.put_opts(&path, bytes.into(), object_store::PutOptions { mode, ..Default::default() });
        match self.runtime.block_on(put) {
            Ok(r) => Ok(Some(r.e_tag.unwrap_or_default())),
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => Ok(None),
            Err(e) => Err(io(&self.name(key), e)),
        }
    }

    /// The bytes at `key` and their entity tag, or `None`.
    pub fn get_tagged(&self, key: &str) -> Result<Option<(Vec<u8>, String)>> {
        let path = self.path(key);
        let got = self.runtime.block_on(async {
            match self.store.get(&path).await {
                Ok(r) => {
                    let tag = r.meta.e_tag.clone().unwrap_or_default();
                    r.bytes().await.map(|b| Some((b.to_vec(), tag)))
                }
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        got.map_err(|e| io(&self.name(key), e))
    }

    /// The `len` bytes at `offset` of `key`, or `None`.
    pub fn get_slice(&self, key: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
        let path = self.path(key);
        let got = self.runtime.block_on(async {
            match self.store.get_range(&path, offset..offset.saturating_add(len)).await {
                Ok(b) => Ok(Some(b.to_vec())),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        got.map_err(|e| io(&self.name(key), e))
    }

    /// The bytes at `key`, or `None`.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let path = self.path(key);
        let got = self.runtime.block_on(async {
            match self.store.get(&path).await {
                Ok(r) => r.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        });
        got.map(|b| b.map(|b| b.to_vec())).map_err(|e| io(&self.name(key), e))
    }

    /// The names directly under `dir` (folders and objects), unsorted.
    pub fn list(&self, dir: &str) -> Result<Vec<String>> {
        let path = self.path(dir);
        let listed =
            self.runtime.block_on(self.store.list_with_delimiter(Some(&path))).map_err(|e| io(&self.name(dir), e))?;
        let dirs = listed.common_prefixes.iter().filter_map(|p| p.filename().map(String::from));
        let files = listed.objects.iter().filter_map(|m| m.location.filename().map(String::from));
        Ok(dirs.chain(files).collect())
    }

    /// Removes `key` and everything under it.
    pub fn delete_all(&self, key: &str) -> Result<()> {
        use futures_util::StreamExt;
        let path = self.path(key);
        self.runtime
            .block_on(async {
                let mut listed = self.store.list(Some(&path));
                let mut keys = Vec::new();
                while let Some(m) = listed.next().await {
                    keys.push(m?.location);
                }
                // The key itself, when it is an object rather than a folder.
                if keys.is_empty() {
                    keys.push(path.clone());
                }
                for k in keys {
                    match self.store.delete(&k).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            })
            .map_err(|e| io(&self.name(key), e))
    }
}
