//! Beam's GroupByKey as Weir's: each KV's bytes split into the key's and the value's, grouped on
//! the key's bytes under the proto's windowing strategy, and each group written back as Beam's
//! `KV<K, Iterable<V>>` encodes it. Weir never decodes an SDK's keys or values.

use weir_sdk::kv::KV;
use weir_sdk::transforms::group_by_key::GroupByKey;
use weir_sdk::{Map, PCollection, TryMap};

use super::{err, Translator};
use crate::preprocess::wire::Wire;
use crate::preprocess::Stage;
use crate::Error;

impl Translator<'_> {
    pub(super) fn group_by_key(&self, stage: &Stage, name: &str) -> Result<PCollection<Vec<u8>>, Error> {
        let [input_pc] = stage.inputs.as_slice() else {
            return Err(err(format!("GroupByKey '{name}' reads {} inputs", stage.inputs.len())));
        };
        let input = self.input(input_pc)?;
        let wire = self.wire(input_pc)?;
        if !matches!(wire, Wire::Kv(..)) {
            return Err(err(format!("GroupByKey '{name}' reads PCollection '{input_pc}', whose coder is not a KV")));
        }
        let split = move |bytes: Vec<u8>| -> weir_sdk::error::UserResult<KV<Vec<u8>, Vec<u8>>> {
            let (k, v) = wire.split_kv(&bytes).ok_or("a KV whose bytes end early")?;
            Ok(KV::new(k.to_vec(), v.to_vec()))
        };
        let keyed = input.apply(&format!("{name}/split"), TryMap::new(split));
        keyed.set_windowing_strategy_internal(self.strategy(input_pc)?);
        let grouped = keyed.apply(name, GroupByKey::<Vec<u8>, Vec<u8>>::as_submitted());
        Ok(grouped.apply(&format!("{name}/join"), Map::new(join_group)))
    }
}

/// A group as Beam's `KV<K, Iterable<V>>` encodes it: the key's bytes, the count as a 4-byte
/// big-endian integer, then each value's bytes.
fn join_group(kv: KV<Vec<u8>, Vec<Vec<u8>>>) -> Vec<u8> {
    let size = kv.key.len() + 4 + kv.value.iter().map(Vec::len).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&kv.key);
    out.extend_from_slice(&(kv.value.len() as i32).to_be_bytes());
    for v in &kv.value {
        out.extend_from_slice(v);
    }
    out
}
