//! Coder properties: every coder round-trips, encodings of equal values are equal, and
//! encoded keys sort like timestamps where Beam promises it.

use proptest::prelude::*;
use std::sync::Arc;
use weir_sdk::coders::*;
use weir_sdk::window::{IntervalWindow, Window};
use weir_sdk::KV;

fn round_trip<T: PartialEq + std::fmt::Debug, C: Coder<T>>(c: &C, v: &T) {
    let mut nested = Vec::new();
    c.encode(v, &mut nested).unwrap();
    nested.extend_from_slice(b"tail");
    let mut rest = nested.as_slice();
    assert_eq!(&c.decode(&mut rest).unwrap(), v);
    assert_eq!(rest, b"tail");
    let mut outer = Vec::new();
    c.encode_outer(v, &mut outer).unwrap();
    assert_eq!(&c.decode_outer(&outer).unwrap(), v);
}

proptest! {
    #[test]
    fn standard_coders_round_trip(i in any::<i64>(), j in any::<i32>(), s in ".*", b in proptest::collection::vec(any::<u8>(), 0..64), d in any::<f64>().prop_filter("not NaN", |d| !d.is_nan()), flag in any::<bool>()) {
        round_trip(&VarLongCoder, &i);
        round_trip(&VarIntCoder, &j);
        round_trip(&BigEndianLongCoder, &i);
        round_trip(&BigEndianIntegerCoder, &j);
        round_trip(&InstantCoder, &i);
        round_trip(&StringUtf8Coder, &s);
        round_trip(&BytesCoder, &b);
        round_trip(&DoubleCoder, &d);
        round_trip(&BoolCoder, &flag);
        round_trip(&KvCoder::new(Arc::new(StringUtf8Coder), Arc::new(BytesCoder)), &KV::new(s.clone(), b.clone()));
        round_trip(&IterableCoder::new(Arc::new(VarLongCoder)), &vec![i, 0, -1]);
        round_trip(&NullableCoder::new(Arc::new(StringUtf8Coder)), &Some(s.clone()));
        round_trip(&NullableCoder::new(Arc::new(StringUtf8Coder)), &None);
        round_trip(&LengthPrefixCoder { inner: Arc::new(StringUtf8Coder) }, &s);
    }

    #[test]
    fn interval_windows_round_trip(start in -1_000_000_000_000i64..1_000_000_000_000, len in 1i64..1_000_000_000) {
        round_trip(&IntervalWindowCoder, &IntervalWindow::new(start, start + len));
    }

    #[test]
    fn instant_encoding_sorts_like_timestamps(a in any::<i64>(), b in any::<i64>()) {
        let (mut x, mut y) = (Vec::new(), Vec::new());
        InstantCoder.encode(&a, &mut x).unwrap();
        InstantCoder.encode(&b, &mut y).unwrap();
        prop_assert_eq!(a.cmp(&b), x.cmp(&y));
    }

    #[test]
    fn element_coder_round_trips(v in proptest::collection::vec((any::<i64>(), ".{0,8}", proptest::option::of(any::<u32>())), 0..20)) {
        round_trip(&ElementCoder::<Vec<(i64, String, Option<u32>)>>::new(), &v);
    }

    #[test]
    fn element_coder_is_deterministic_for_equal_values(k in ".{0,16}", n in any::<i64>()) {
        let c = ElementCoder::<KV<String, i64>>::new();
        let (mut x, mut y) = (Vec::new(), Vec::new());
        c.encode(&KV::new(k.clone(), n), &mut x).unwrap();
        c.encode(&KV::new(k.clone(), n), &mut y).unwrap();
        prop_assert_eq!(x, y);
    }

    #[test]
    fn truncated_input_is_an_error_not_a_panic(s in ".{1,32}") {
        let mut buf = Vec::new();
        StringUtf8Coder.encode(&s, &mut buf).unwrap();
        buf.pop();
        prop_assert!(StringUtf8Coder.decode(&mut buf.as_slice()).is_err());
        let mut e = Vec::new();
        ElementCoder::<(String, String)>::new().encode(&(s.clone(), s.clone()), &mut e).unwrap();
        e.pop();
        prop_assert!(ElementCoder::<(String, String)>::new().decode(&mut e.as_slice()).is_err());
    }
}

/// Decodes `bytes` nested and outer with `c`; the result may be anything but a panic.
fn decode_any<T, C: Coder<T>>(c: &C, bytes: &[u8]) {
    let mut rest = bytes;
    let _ = c.decode(&mut rest);
    let _ = c.decode_outer(bytes);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Issue 16: bad bytes never panic. Every decoder, on arbitrary bytes, returns an element
    /// or an error.
    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..96)) {
        decode_any(&BytesCoder, &bytes);
        decode_any(&StringUtf8Coder, &bytes);
        decode_any(&BoolCoder, &bytes);
        decode_any(&VarLongCoder, &bytes);
        decode_any(&VarIntCoder, &bytes);
        decode_any(&BigEndianLongCoder, &bytes);
        decode_any(&BigEndianIntegerCoder, &bytes);
        decode_any(&DoubleCoder, &bytes);
        decode_any(&InstantCoder, &bytes);
        decode_any(&IntervalWindowCoder, &bytes);
        decode_any(&KvCoder::new(Arc::new(StringUtf8Coder), Arc::new(VarLongCoder)), &bytes);
        decode_any(&IterableCoder::new(Arc::new(StringUtf8Coder)), &bytes);
        decode_any(&NullableCoder::new(Arc::new(BytesCoder)), &bytes);
        decode_any(&LengthPrefixCoder { inner: Arc::new(VarLongCoder) }, &bytes);
        for window in [WindowCoderKind::Global, WindowCoderKind::Interval] {
            decode_any(&WindowedValueCoder { value: Arc::new(StringUtf8Coder), window }, &bytes);
        }
        decode_any(&ElementCoder::<i64>::new(), &bytes);
        decode_any(&ElementCoder::<u32>::new(), &bytes);
        decode_any(&ElementCoder::<String>::new(), &bytes);
        decode_any(&ElementCoder::<Vec<(i64, String, Option<u32>)>>::new(), &bytes);
        decode_any(&ElementCoder::<KV<String, Vec<f64>>>::new(), &bytes);
        decode_any(&ElementCoder::<weir_nexmark::Event>::new(), &bytes);
    }
}

#[test]
fn window_enum_encodings_follow_beam() {
    let mut out = Vec::new();
    Window::Global.encode(&mut out);
    assert!(out.is_empty());
    Window::Interval(IntervalWindow::new(-100, 1000)).encode(&mut out);
    assert_eq!(out, vec![0x80, 0, 0, 0, 0, 0, 0x03, 0xe8, 0xcc, 0x08]);
}
