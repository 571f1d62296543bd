//! Encoding of operator state for checkpoints: postcard with a step-named error on failure.

use serde::de::DeserializeOwned;
use serde::Serialize;
use weir_sdk::{Error, Result};

/// Encodes operator state.
pub fn encode<T: Serialize>(step: &str, value: &T) -> Result<Vec<u8>> {
    postcard::to_stdvec(value)
        .map_err(|e| Error::Internal { component: format!("state of {step}"), message: format!("cannot encode: {e}") })
}

/// Decodes operator state written by [`encode`]; a corrupt snapshot is an error naming the step.
pub fn decode<T: DeserializeOwned>(step: &str, bytes: &[u8]) -> Result<T> {
    postcard::from_bytes(bytes).map_err(|e| Error::Execution {
        step: step.to_string(),
        message: format!("corrupt state snapshot ({} bytes): {e}", bytes.len()),
    })
}
