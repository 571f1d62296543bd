//! Tests.

use super::*;

fn scope(state: &mut KeyedState) -> StateScope<'_> {
    StateScope { state: Some(state), time: StateTime::at(0, 0, 100), skew: 0 }
}

#[test]
fn emptiness_is_answered_without_decoding_values() {
    let mut state = KeyedState::default();
    let mut s = scope(&mut state);
    BagState::<String> { scope: &mut s, id: "bag".into(), _t: PhantomData }.add(&"x".to_string()).unwrap();
    // The two bytes of "x" are no nine-byte array: a read fails, but emptiness needs no
    // decoding.
    let mut wrong = BagState::<[u8; 9]> { scope: &mut s, id: "bag".into(), _t: PhantomData };
    assert!(wrong.read().is_err());
    assert!(!wrong.is_empty().unwrap());
    let view = wrong.is_empty_view();
    let mut other = KeyedState::default();
    let mut empty = scope(&mut other);
    assert!((view.read)(&mut empty).unwrap(), "a view reads the scope it is read in");
}
