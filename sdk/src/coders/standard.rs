//! Beam's standard (model) coders, byte-exact with `standard_coders.yaml`.

use super::{read_byte, read_bytes, read_timestamp, read_varint, write_timestamp, write_varint};
use super::{Coder, CoderError, CoderRef};
use crate::kv::KV;
use crate::pane::PaneInfo;
use crate::time::Timestamp;
use crate::window::{IntervalWindow, Window};

fn read_len(input: &mut &[u8]) -> Result<usize, CoderError> {
    usize::try_from(read_varint(input)?).map_err(|_| CoderError::new("length does not fit in memory"))
}

/// `beam:coder:bytes:v1`: raw bytes outer, varint length + bytes nested.
#[derive(Clone, Copy, Debug, Default)]
pub struct BytesCoder;

impl Coder<Vec<u8>> for BytesCoder {
    fn encode(&self, v: &Vec<u8>, out: &mut Vec<u8>) -> Result<(), CoderError> {
        write_varint(v.len() as u64, out);
        out.extend_from_slice(v);
        Ok(())
    }
    fn decode(&self, input: &mut &[u8]) -> Result<Vec<u8>, CoderError> {
        let n = read_len(input)?;
        Ok(read_bytes(input, n)?.to_vec())
    }
    fn encode_outer(&self, v: &Vec<u8>, out: &mut Vec<u8>) -> Result<(), CoderError> {
        out.extend_from_slice(v);
        Ok(())
    }
    fn decode_outer(&self, input: &[u8]) -> Result<Vec<u8>, CoderError> {
        Ok(input.to_vec())
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        Ok(())
    }
    fn name(&self) -> String {
        "beam:coder:bytes:v1".into()
    }
}

/// `beam:coder:string_utf8:v1`: UTF-8 bytes, length-prefixed when nested.
#[derive(Clone, Copy, Debug, Default)]
pub struct StringUtf8Coder;

impl Coder<String> for StringUtf8Coder {
    fn encode(&self, v: &String, out: &mut Vec<u8>) -> Result<(), CoderError> {
        write_varint(v.len() as u64, out);
        out.extend_from_slice(v.as_bytes());
        Ok(())
    }
    fn decode(&self, input: &mut &[u8]) -> Result<String, CoderError> {
        let n = read_len(input)?;
        let b = read_bytes(input, n)?;
        String::from_utf8(b.to_vec()).map_err(|e| CoderError::new(format!("invalid UTF-8: {e}")))
    }
    fn encode_outer(&self, v: &String, out: &mut Vec<u8>) -> Result<(), CoderError> {
        out.extend_from_slice(v.as_bytes());
        Ok(())
    }
    fn decode_outer(&self, input: &[u8]) -> Result<String, CoderError> {
        String::from_utf8(input.to_vec()).map_err(|e| CoderError::new(format!("invalid UTF-8: {e}")))
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        Ok(())
    }
    fn name(&self) -> String {
        "beam:coder:string_utf8:v1".into()
    }
}

/// `beam:coder:bool:v1`: one byte, 0 or 1.
#[derive(Clone, Copy, Debug, Default)]
pub struct BoolCoder;

impl Coder<bool> for BoolCoder {
    fn encode(&self, v: &bool, out: &mut Vec<u8>) -> Result<(), CoderError> {
        out.push(u8::from(*v));
        Ok(())
    }
    fn decode(&self, input: &mut &[u8]) -> Result<bool, CoderError> {
        match read_byte(input)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(CoderError::new(format!("invalid bool byte {b:#04x}"))),
        }
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        Ok(())
    }
    fn name(&self) -> String {
        "beam:coder:bool:v1".into()
    }
}

/// `beam:coder:varint:v1` (Java `VarLongCoder`): LEB128 of the two's complement 64-bit value.
#[derive(Clone, Copy, Debug, Default)]
pub struct VarLongCoder;

impl Coder<i64> for VarLongCoder {
    fn encode(&self, v: &i64, out: &mut Vec<u8>) -> Result<(), CoderError> {
        write_varint(*v as u64, out);
        Ok(())
    }
    fn decode(&self, input: &mut &[u8]) -> Result<i64, CoderError> {
        Ok(read_varint(input)? as i64)
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        Ok(())
    }
    fn name(&self) -> String {
        "beam:coder:varint:v1".into()
    }
}

/// Java `VarIntCoder`: LEB128 of the two's complement 32-bit value.
#[derive(Clone, Copy, Debug, Default)]
pub struct VarIntCoder;

impl Coder<i32> for VarIntCoder {
    fn encode(&self, v: &i32, out: &mut Vec<u8>) -> Result<(), CoderError> {
        write_varint(u64::from(*v as u32), out);
        Ok(())
    }
    fn decode(&self, input: &mut &[u8]) -> Result<i32, CoderError> {
        let v = read_varint(input)?;
        u32::try_from(v).map(|u| u as i32).map_err(|_| CoderError::new("varint does not fit in 32 bits"))
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        Ok(())
    }
    fn name(&self) -> String {
        "VarIntCoder".into()
    }
}

/// Java `BigEndianLongCoder`: 8 bytes big-endian.
#[derive(Clone, Copy, Debug, Default)]
pub struct BigEndianLongCoder;

impl Coder<i64> for BigEndianLongCoder {
    fn encode(&self, v: &i64, out: &mut Vec<u8>) -> Result<(), CoderError> {
        out.extend_from_slice(&v.to_be_bytes());
        Ok(())
    }
    fn decode(&self, input: &mut &[u8]) -> Result<i64, CoderError> {
        Ok(i64::from_be_bytes(read_bytes(input, 8)?.try_into().expect("8 bytes")))
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        Ok(())
    }
    fn name(&self) -> String {
        "BigEndianLongCoder".into()
    }
}

/// Java `BigEndianIntegerCoder`: 4 bytes big-endian.
#[derive(Clone, Copy, Debug, Default)]
pub struct BigEndianIntegerCoder;

impl Coder<i32> for BigEndianIntegerCoder {
    fn encode(&self, v: &i32, out: &mut Vec<u8>) -> Result<(), CoderError> {
        out.extend_from_slice(&v.to_be_bytes());
        Ok(())
    }
    fn decode(&self, input: &mut &[u8]) -> Result<i32, CoderError> {
        Ok(i32::from_be_bytes(read_bytes(input, 4)?.try_into().expect("4 bytes")))
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        Ok(())
    }
    fn name(&self) -> String {
        "BigEndianIntegerCoder".into()
    }
}

/// `beam:coder:double:v1`: 8-byte big-endian IEEE 754. Not deterministic (as in Beam).
#[derive(Clone, Copy, Debug, Default)]
pub struct DoubleCoder;

impl Coder<f64> for DoubleCoder {
    fn encode(&self, v: &f64, out: &mut Vec<u8>) -> Result<(), CoderError> {
        out.extend_from_slice(&v.to_bits().to_be_bytes());
        Ok(())
    }
    fn decode(&self, input: &mut &[u8]) -> Result<f64, CoderError> {
        Ok(f64::from_bits(u64::from_be_bytes(read_bytes(input, 8)?.try_into().expect("8 bytes"))))
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        Err("DoubleCoder: floating-point values may have several encodings of equal values".into())
    }
    fn name(&self) -> String {
        "beam:coder:double:v1".into()
    }
}

/// Java `InstantCoder`: 8 bytes big-endian with the sign bit flipped.
#[derive(Clone, Copy, Debug, Default)]
pub struct InstantCoder;

impl Coder<Timestamp> for InstantCoder {
    fn encode(&self, v: &Timestamp, out: &mut Vec<u8>) -> Result<(), CoderError> {
        write_timestamp(*v, out);
        Ok(())
    }
    fn decode(&self, input: &mut &[u8]) -> Result<Timestamp, CoderError> {
        read_timestamp(input)
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        Ok(())
    }
    fn name(&self) -> String {
        "InstantCoder".into()
    }
}

/// `beam:coder:kv:v1`: the key nested, then the value in the KV's own context.
pub struct KvCoder<K, V> {
    /// The key coder.
    pub key: CoderRef<K>,
    /// The value coder.
    pub value: CoderRef<V>,
}

impl<K, V> KvCoder<K, V> {
    /// A KV coder from its components.
    pub fn new(key: CoderRef<K>, value: CoderRef<V>) -> Self {
        KvCoder { key, value }
    }
}

impl<K: Send + Sync + 'static, V: Send + Sync + 'static> Coder<KV<K, V>> for KvCoder<K, V> {
    fn encode(&self, v: &KV<K, V>, out: &mut Vec<u8>) -> Result<(), CoderError> {
        self.key.encode(&v.key, out)?;
        self.value.encode(&v.value, out)
    }
    fn decode(&self, input: &mut &[u8]) -> Result<KV<K, V>, CoderError> {
        let key = self.key.decode(input)?;
        let value = self.value.decode(input)?;
        Ok(KV { key, value })
    }
    fn encode_outer(&self, v: &KV<K, V>, out: &mut Vec<u8>) -> Result<(), CoderError> {
        self.key.encode(&v.key, out)?;
        self.value.encode_outer(&v.value, out)
    }
    fn decode_outer(&self, input: &[u8]) -> Result<KV<K, V>, CoderError> {
        let mut rest = input;
        let key = self.key.decode(&mut rest)?;
        let value = self.value.decode_outer(rest)?;
        Ok(KV { key, value })
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        self.key.verify_deterministic()?;
        self.value.verify_deterministic()
    }
    fn name(&self) -> String {
        format!("beam:coder:kv:v1({}, {})", self.key.name(), self.value.name())
    }
}

/// `beam:coder:iterable:v1`: 4-byte big-endian count, then the elements nested. Decodes the
/// unknown-length form (count -1, then blocks of varint n and n elements, ending with 0) too.
pub struct IterableCoder<T> {
    /// The element coder.
    pub element: CoderRef<T>,
}

impl<T> IterableCoder<T> {
    /// An iterable coder over `element`.
    pub fn new(element: CoderRef<T>) -> Self {
        IterableCoder { element }
    }
}

impl<T: Send + Sync + 'static> Coder<Vec<T>> for IterableCoder<T> {
    fn encode(&self, v: &Vec<T>, out: &mut Vec<u8>) -> Result<(), CoderError> {
        let n = i32::try_from(v.len()).map_err(|_| CoderError::new("iterable longer than i32::MAX"))?;
        out.extend_from_slice(&n.to_be_bytes());
        v.iter().try_for_each(|e| self.element.encode(e, out))
    }
    fn decode(&self, input: &mut &[u8]) -> Result<Vec<T>, CoderError> {
        let n = i32::from_be_bytes(read_bytes(input, 4)?.try_into().expect("4 bytes"));
        if n >= 0 {
            let mut v = Vec::with_capacity((n as usize).min(input.len()));
            for _ in 0..n {
                v.push(self.element.decode(input)?);
            }
            return Ok(v);
        }
        if n != -1 {
            return Err(CoderError::new(format!("invalid iterable count {n}")));
        }
        let mut v = Vec::new();
        loop {
            let block = read_len(input)?;
            if block == 0 {
                return Ok(v);
            }
            for _ in 0..block {
                v.push(self.element.decode(input)?);
            }
        }
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        self.element.verify_deterministic()
    }
    fn name(&self) -> String {
        format!("beam:coder:iterable:v1({})", self.element.name())
    }
}

/// `beam:coder:nullable:v1`: one byte 0 (null) or 1 followed by the value.
pub struct NullableCoder<T> {
    /// The coder of present values.
    pub inner: CoderRef<T>,
}

impl<T> NullableCoder<T> {
    /// A nullable coder over `inner`.
    pub fn new(inner: CoderRef<T>) -> Self {
        NullableCoder { inner }
    }
}

impl<T: Send + Sync + 'static> Coder<Option<T>> for NullableCoder<T> {
    fn encode(&self, v: &Option<T>, out: &mut Vec<u8>) -> Result<(), CoderError> {
        match v {
            None => {
                out.push(0);
                Ok(())
            }
            Some(x) => {
                out.push(1);
                self.inner.encode(x, out)
            }
        }
    }
    fn decode(&self, input: &mut &[u8]) -> Result<Option<T>, CoderError> {
        match read_byte(input)? {
            0 => Ok(None),
            1 => Ok(Some(self.inner.decode(input)?)),
            b => Err(CoderError::new(format!("invalid nullable marker {b:#04x}"))),
        }
    }
    fn encode_outer(&self, v: &Option<T>, out: &mut Vec<u8>) -> Result<(), CoderError> {
        match v {
            None => {
                out.push(0);
                Ok(())
            }
            Some(x) => {
                out.push(1);
                self.inner.encode_outer(x, out)
            }
        }
    }
    fn decode_outer(&self, input: &[u8]) -> Result<Option<T>, CoderError> {
        let mut rest = input;
        match read_byte(&mut rest)? {
            0 if rest.is_empty() => Ok(None),
            1 => Ok(Some(self.inner.decode_outer(rest)?)),
            b => Err(CoderError::new(format!("invalid nullable marker {b:#04x}"))),
        }
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        self.inner.verify_deterministic()
    }
    fn name(&self) -> String {
        format!("beam:coder:nullable:v1({})", self.inner.name())
    }
}

/// `beam:coder:length_prefix:v1`: varint length, then the inner coder's outer encoding.
pub struct LengthPrefixCoder<T> {
    /// The wrapped coder.
    pub inner: CoderRef<T>,
}

impl<T: Send + Sync + 'static> Coder<T> for LengthPrefixCoder<T> {
    fn encode(&self, v: &T, out: &mut Vec<u8>) -> Result<(), CoderError> {
        let mut buf = Vec::new();
        self.inner.encode_outer(v, &mut buf)?;
        write_varint(buf.len() as u64, out);
        out.extend_from_slice(&buf);
        Ok(())
    }
    fn decode(&self, input: &mut &[u8]) -> Result<T, CoderError> {
        let n = read_len(input)?;
        self.inner.decode_outer(read_bytes(input, n)?)
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        self.inner.verify_deterministic()
    }
    fn name(&self) -> String {
        format!("beam:coder:length_prefix:v1({})", self.inner.name())
    }
}

/// Appends the `beam:coder:interval_window:v1` encoding: end as an instant, then varint span.
pub fn encode_interval_window(w: &IntervalWindow, out: &mut Vec<u8>) {
    write_timestamp(w.end, out);
    write_varint(w.end.wrapping_sub(w.start) as u64, out);
}

/// `beam:coder:interval_window:v1`.
#[derive(Clone, Copy, Debug, Default)]
pub struct IntervalWindowCoder;

impl Coder<IntervalWindow> for IntervalWindowCoder {
    fn encode(&self, v: &IntervalWindow, out: &mut Vec<u8>) -> Result<(), CoderError> {
        encode_interval_window(v, out);
        Ok(())
    }
    fn decode(&self, input: &mut &[u8]) -> Result<IntervalWindow, CoderError> {
        let end = read_timestamp(input)?;
        let span = read_varint(input)? as i64;
        Ok(IntervalWindow::new(end.wrapping_sub(span), end))
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        Ok(())
    }
    fn name(&self) -> String {
        "beam:coder:interval_window:v1".into()
    }
}

/// `beam:coder:global_window:v1`: zero bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct GlobalWindowCoder;

impl Coder<()> for GlobalWindowCoder {
    fn encode(&self, _: &(), _: &mut Vec<u8>) -> Result<(), CoderError> {
        Ok(())
    }
    fn decode(&self, _: &mut &[u8]) -> Result<(), CoderError> {
        Ok(())
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        Ok(())
    }
    fn name(&self) -> String {
        "beam:coder:global_window:v1".into()
    }
}

/// Which window coder a [`WindowedValueCoder`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowCoderKind {
    /// `beam:coder:global_window:v1`.
    Global,
    /// `beam:coder:interval_window:v1`.
    Interval,
    /// A window coder of an SDK's own, which Weir asks harnesses to write as
    /// `beam:coder:custom_window:v1` of `beam:coder:length_prefix:v1` of it: the window's last
    /// instant, then its bytes, length-prefixed ([`Window::Sdk`]).
    Sdk,
}

impl WindowCoderKind {
    /// Reads one window in this coder.
    pub fn decode(self, input: &mut &[u8]) -> Result<Window, CoderError> {
        Ok(match self {
            WindowCoderKind::Global => Window::Global,
            WindowCoderKind::Interval => Window::Interval(IntervalWindowCoder.decode(input)?),
            WindowCoderKind::Sdk => {
                let max_timestamp = read_timestamp(input)?;
                let n = read_varint(input)?;
                let n = usize::try_from(n).map_err(|_| CoderError::new(format!("invalid window length {n}")))?;
                Window::Sdk(crate::window::SdkWindow::new(max_timestamp, read_bytes(input, n)?))
            }
        })
    }

    /// Whether `window` is of this coder.
    pub fn fits(self, window: &Window) -> bool {
        matches!(
            (self, window),
            (WindowCoderKind::Global, Window::Global)
                | (WindowCoderKind::Interval, Window::Interval(_))
                | (WindowCoderKind::Sdk, Window::Sdk(_))
        )
    }
}

/// A value with its timestamp, all its windows and its pane: the form Beam's
/// `FullWindowedValueCoder` encodes.
#[derive(Clone, Debug, PartialEq)]
pub struct FullWindowedValue<T> {
    /// The value.
    pub value: T,
    /// Event timestamp.
    pub timestamp: Timestamp,
    /// Every window the value is in.
    pub windows: Vec<Window>,
    /// The pane.
    pub pane: PaneInfo,
}

/// `beam:coder:windowed_value:v1`: timestamp, windows (4-byte count + windows), pane, value.
pub struct WindowedValueCoder<T> {
    /// The value coder.
    pub value: CoderRef<T>,
    /// The window coder.
    pub window: WindowCoderKind,
}

impl<T: Send + Sync + 'static> Coder<FullWindowedValue<T>> for WindowedValueCoder<T> {
    fn encode(&self, v: &FullWindowedValue<T>, out: &mut Vec<u8>) -> Result<(), CoderError> {
        write_timestamp(v.timestamp, out);
        out.extend_from_slice(&(v.windows.len() as i32).to_be_bytes());
        for w in &v.windows {
            match (self.window, w) {
                (WindowCoderKind::Global, Window::Global) => {}
                (WindowCoderKind::Interval, Window::Interval(iw)) => encode_interval_window(iw, out),
                (WindowCoderKind::Sdk, w @ Window::Sdk(_)) => w.encode(out),
                (k, w) => return Err(CoderError::new(format!("window {w} does not match window coder {k:?}"))),
            }
        }
        v.pane.encode(out);
        self.value.encode(&v.value, out)
    }
    fn decode(&self, input: &mut &[u8]) -> Result<FullWindowedValue<T>, CoderError> {
        let timestamp = read_timestamp(input)?;
        let n = i32::from_be_bytes(read_bytes(input, 4)?.try_into().expect("4 bytes"));
        if n < 0 {
            return Err(CoderError::new(format!("invalid window count {n}")));
        }
        // A value is in the global window once; a larger count would repeat it (and, as global
        // windows take no bytes, make a count read from bad input loop for as long as it says).
        if self.window == WindowCoderKind::Global && n > 1 {
            return Err(CoderError::new(format!("invalid window count {n} for the global window")));
        }
        // The count comes from the input: reserve no more than the bytes left could hold.
        let mut windows = Vec::with_capacity((n as usize).min(input.len()));
        for _ in 0..n {
            windows.push(self.window.decode(input)?);
        }
        let pane = PaneInfo::decode(input)?;
        let value = self.value.decode(input)?;
        Ok(FullWindowedValue { value, timestamp, windows, pane })
    }
    fn verify_deterministic(&self) -> Result<(), String> {
        self.value.verify_deterministic()
    }
    fn name(&self) -> String {
        format!("beam:coder:windowed_value:v1({})", self.value.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pane::Timing;
    use std::sync::Arc;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect::<Vec<_>>().join(" ")
    }

    fn nested<T, C: Coder<T>>(c: &C, v: &T) -> String {
        let mut out = Vec::new();
        c.encode(v, &mut out).unwrap();
        hex(&out)
    }

    fn outer<T, C: Coder<T>>(c: &C, v: &T) -> String {
        let mut out = Vec::new();
        c.encode_outer(v, &mut out).unwrap();
        hex(&out)
    }

    #[test]
    fn bytes_and_strings() {
        assert_eq!(outer(&BytesCoder, &b"abc".to_vec()), "61 62 63");
        assert_eq!(nested(&BytesCoder, &b"abc".to_vec()), "03 61 62 63");
        assert_eq!(outer(&BytesCoder, &vec![]), "");
        assert_eq!(nested(&StringUtf8Coder, &"ab".to_string()), "02 61 62");
        assert_eq!(outer(&StringUtf8Coder, &"\u{263a}".to_string()), "e2 98 ba");
        assert!(StringUtf8Coder.decode_outer(&[0xff]).is_err());
    }

    #[test]
    fn varints_booleans_doubles() {
        assert_eq!(nested(&VarLongCoder, &0), "00");
        assert_eq!(nested(&VarLongCoder, &1), "01");
        assert_eq!(nested(&VarLongCoder, &127), "7f");
        assert_eq!(nested(&VarLongCoder, &128), "80 01");
        assert_eq!(nested(&VarLongCoder, &200), "c8 01");
        assert_eq!(nested(&VarLongCoder, &-1), "ff ff ff ff ff ff ff ff ff 01");
        assert_eq!(nested(&VarIntCoder, &-1), "ff ff ff ff 0f");
        assert_eq!(nested(&BoolCoder, &true), "01");
        assert_eq!(nested(&BoolCoder, &false), "00");
        assert!(BoolCoder.decode(&mut &[2u8][..]).is_err());
        assert_eq!(nested(&DoubleCoder, &1.0), "3f f0 00 00 00 00 00 00");
        assert_eq!(nested(&DoubleCoder, &-1.5), "bf f8 00 00 00 00 00 00");
        assert!(DoubleCoder.verify_deterministic().is_err());
    }

    #[test]
    fn timestamps() {
        assert_eq!(nested(&InstantCoder, &1_454_293_425_000), "80 00 01 52 9a a4 9b 68");
        assert_eq!(nested(&InstantCoder, &-400_000), "7f ff ff ff ff f9 e5 80");
        assert_eq!(nested(&InstantCoder, &crate::time::MIN_TIMESTAMP), "7f df 3b 64 5a 1c ac 09");
    }

    #[test]
    fn kv_iterable_nullable() {
        let kv = KvCoder::new(Arc::new(BytesCoder), Arc::new(VarLongCoder));
        assert_eq!(nested(&kv, &KV::new(b"abc".to_vec(), 0)), "03 61 62 63 00");
        let kvs = KvCoder::new(Arc::new(StringUtf8Coder), Arc::new(StringUtf8Coder));
        assert_eq!(outer(&kvs, &KV::new("a".to_string(), "bc".to_string())), "01 61 62 63");
        let it = IterableCoder::new(Arc::new(VarLongCoder));
        assert_eq!(nested(&it, &vec![1, 2, 3]), "00 00 00 03 01 02 03");
        // Unknown-length form: count -1, a block of 2, a block of 1, then 0.
        let bytes = [0xff, 0xff, 0xff, 0xff, 2, 7, 8, 1, 9, 0];
        assert_eq!(it.decode(&mut &bytes[..]).unwrap(), vec![7, 8, 9]);
        let n = NullableCoder::new(Arc::new(StringUtf8Coder));
        assert_eq!(nested(&n, &None), "00");
        assert_eq!(nested(&n, &Some("x".to_string())), "01 01 78");
        assert_eq!(outer(&n, &Some("x".to_string())), "01 78");
    }

    #[test]
    fn windows_and_windowed_values() {
        let w = IntervalWindow::new(-100, 1000);
        let mut out = Vec::new();
        encode_interval_window(&w, &mut out);
        assert_eq!(hex(&out), "80 00 00 00 00 00 03 e8 cc 08");
        assert_eq!(IntervalWindowCoder.decode(&mut out.as_slice()).unwrap(), w);

        // The runner guide's encoding of Impulse's single element.
        let c = WindowedValueCoder { value: Arc::new(BytesCoder), window: WindowCoderKind::Global };
        let impulse = FullWindowedValue {
            value: vec![],
            timestamp: crate::time::MIN_TIMESTAMP,
            windows: vec![Window::Global],
            pane: PaneInfo::NO_FIRING,
        };
        assert_eq!(nested(&c, &impulse), "7f df 3b 64 5a 1c ac 09 00 00 00 01 0f 00");
        let mut bytes = Vec::new();
        c.encode(&impulse, &mut bytes).unwrap();
        assert_eq!(c.decode(&mut bytes.as_slice()).unwrap(), impulse);
    }

    #[test]
    fn pane_info_encodings() {
        let mut out = Vec::new();
        PaneInfo::NO_FIRING.encode(&mut out);
        assert_eq!(hex(&out), "0f");
        let p =
            PaneInfo { is_first: false, is_last: true, timing: Timing::OnTime, index: 30, non_speculative_index: 40 };
        let mut out = Vec::new();
        p.encode(&mut out);
        assert_eq!(hex(&out), "26 1e 28");
        assert_eq!(PaneInfo::decode(&mut out.as_slice()).unwrap(), p);
        let early =
            PaneInfo { is_first: false, is_last: false, timing: Timing::Early, index: 3, non_speculative_index: -1 };
        let mut out = Vec::new();
        early.encode(&mut out);
        assert_eq!(hex(&out), "10 03");
        assert_eq!(PaneInfo::decode(&mut out.as_slice()).unwrap(), early);
    }
}
