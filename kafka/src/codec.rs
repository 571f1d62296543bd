//! How record keys and values become typed elements and back: raw bytes, UTF-8 text, or JSON
//! through serde.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use weir_sdk::coders::Element;

/// A type a record's key or value decodes into (Kafka's `Deserializer`). `None` is a null key or
/// value (a record without a key, a tombstone).
pub trait KafkaDecode: Element {
    /// Decodes `bytes`, or says why it cannot.
    fn decode(bytes: Option<&[u8]>) -> Result<Self, String>;
}

/// A type a record's key or value encodes from (Kafka's `Serializer`). `None` writes a null.
pub trait KafkaEncode: Element {
    /// The bytes to write: borrowed when the value holds them already (bytes, text).
    fn encode(&self) -> Result<Option<Cow<'_, [u8]>>, String>;
}

impl KafkaDecode for Vec<u8> {
    /// The bytes as they are; a null is empty.
    fn decode(bytes: Option<&[u8]>) -> Result<Self, String> {
        Ok(bytes.unwrap_or_default().to_vec())
    }
}

impl KafkaEncode for Vec<u8> {
    fn encode(&self) -> Result<Option<Cow<'_, [u8]>>, String> {
        Ok(Some(Cow::Borrowed(self)))
    }
}

impl KafkaDecode for String {
    /// UTF-8 text; a null is empty.
    fn decode(bytes: Option<&[u8]>) -> Result<Self, String> {
        String::from_utf8(bytes.unwrap_or_default().to_vec()).map_err(|e| format!("not UTF-8: {e}"))
    }
}

impl KafkaEncode for String {
    fn encode(&self) -> Result<Option<Cow<'_, [u8]>>, String> {
        Ok(Some(Cow::Borrowed(self.as_bytes())))
    }
}

impl<T: KafkaDecode> KafkaDecode for Option<T> {
    /// A null is `None`; anything else decodes as `T`.
    fn decode(bytes: Option<&[u8]>) -> Result<Self, String> {
        bytes.map(|b| T::decode(Some(b))).transpose()
    }
}

impl<T: KafkaEncode> KafkaEncode for Option<T> {
    fn encode(&self) -> Result<Option<Cow<'_, [u8]>>, String> {
        match self {
            Some(v) => v.encode(),
            None => Ok(None),
        }
    }
}

/// A key or value in JSON, decoded with serde: `Json<MyEvent>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Json<T>(pub T);

impl<T: Element + DeserializeOwned> KafkaDecode for Json<T> {
    fn decode(bytes: Option<&[u8]>) -> Result<Self, String> {
        let bytes = bytes.ok_or("a null where JSON was expected")?;
        serde_json::from_slice(bytes).map(Json).map_err(|e| format!("not the expected JSON: {e}"))
    }
}

impl<T: Element + Serialize> KafkaEncode for Json<T> {
    fn encode(&self) -> Result<Option<Cow<'_, [u8]>>, String> {
        serde_json::to_vec(&self.0).map(|v| Some(Cow::Owned(v))).map_err(|e| format!("cannot write JSON: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
    struct Bid {
        auction: u64,
        price: u64,
    }

    #[test]
    fn decodes_bytes_text_json_and_nulls() {
        assert_eq!(Vec::<u8>::decode(Some(b"ab")).unwrap(), b"ab".to_vec());
        assert_eq!(String::decode(Some("é".as_bytes())).unwrap(), "é");
        assert!(String::decode(Some(&[0xff, 0xfe])).unwrap_err().contains("not UTF-8"));
        assert_eq!(Option::<String>::decode(None).unwrap(), None);
        assert_eq!(Option::<String>::decode(Some(b"x")).unwrap(), Some("x".into()));
        let bid = Json::<Bid>::decode(Some(br#"{"auction":3,"price":7}"#)).unwrap();
        assert_eq!(bid.0, Bid { auction: 3, price: 7 });
        assert!(Json::<Bid>::decode(Some(b"{")).unwrap_err().contains("JSON"));
        assert!(Json::<Bid>::decode(None).unwrap_err().contains("null"));
        assert_eq!(bid.encode().unwrap().unwrap(), br#"{"auction":3,"price":7}"#.to_vec());
        assert_eq!(Option::<String>::None.encode().unwrap(), None);
    }
}
