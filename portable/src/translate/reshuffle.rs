//! Reshuffle and Redistribute: a repartition that changes no element.
//!
//! Of KVs (Beam Java's `Reshuffle.of()`, `Redistribute.byKey()`), elements are placed by their
//! key's bytes, so that a key's elements stay in one partition in the order they came: Beam
//! runners deliver a key's elements in order across such a shuffle (Beam's
//! `UsesPerKeyOrderedDelivery`). Of anything else (or `Redistribute.arbitrarily()`), Weir's
//! reshuffle spreads them evenly.

use std::sync::Arc;

use weir_sdk::error::UserResult;
use weir_sdk::kernel::{rows_mut, Batch, ErasedDoFn, KeyedStateEnv, SideInputReader};
use weir_sdk::transforms::par_do::ErasedParDo;
use weir_sdk::transforms::reshuffle::Reshuffle;
use weir_sdk::window::Window;
use weir_sdk::window_fn::WindowingStrategy;
use weir_sdk::PCollection;

use crate::preprocess::wire::Wire;

/// `input` repartitioned: by the key of each KV when `kv` is its wire form and its windows
/// never merge (a stateful step cannot take those), otherwise spread evenly.
pub fn reshuffle(
    input: PCollection<Vec<u8>>,
    name: &str,
    kv: Option<Wire>,
    strategy: WindowingStrategy,
) -> PCollection<Vec<u8>> {
    let Some(kv) = kv.filter(|_| !strategy.window_fn.is_merging()) else {
        return input.apply(name, Reshuffle::via_random_key());
    };
    // As Beam's reshuffle, no element is ever late: the keyed step reads a copy of the input
    // whose windows never expire.
    let mut lenient = strategy.clone();
    lenient.allowed_lateness_ms = weir_sdk::time::GLOBAL_WINDOW_MAX_TIMESTAMP;
    let copy = input.apply(&format!("{name}/Lenient"), weir_sdk::Map::new(|v: Vec<u8>| v));
    copy.set_windowing_strategy_internal(lenient);
    let factory: weir_sdk::kernel::DoFnFactory = Arc::new(|| Box::new(PassThrough) as Box<dyn ErasedDoFn>);
    let keyed =
        ErasedParDo::<Vec<u8>, Vec<u8>>::new("weir_portable::ReshuffleByKey", factory, vec![("out".into(), strategy)])
            .stateful(Arc::new(super::stage::WireKeys(Some(kv))));
    copy.apply(name, keyed).all()[0].clone()
}

/// Passes every element on unchanged (its placement is the point).
struct PassThrough;

impl PassThrough {
    fn pass(input: Batch, outputs: &mut [Batch]) -> UserResult {
        let out = outputs.first_mut().and_then(rows_mut::<Vec<u8>>).ok_or("internal error: no output buffer")?;
        out.extend(weir_sdk::kernel::downcast_batch::<Vec<u8>>(input)?);
        Ok(())
    }
}

impl ErasedDoFn for PassThrough {
    fn setup(&mut self) -> UserResult {
        Ok(())
    }
    fn start_bundle(&mut self) -> UserResult {
        Ok(())
    }
    fn process_batch(&mut self, input: Batch, outputs: &mut [Batch], _: &dyn SideInputReader) -> UserResult {
        Self::pass(input, outputs)
    }
    fn process_keyed(
        &mut self,
        input: Batch,
        outputs: &mut [Batch],
        _: &dyn SideInputReader,
        _: &mut dyn KeyedStateEnv,
    ) -> UserResult {
        Self::pass(input, outputs)
    }
    fn on_timer(
        &mut self,
        _: &[u8],
        _: Window,
        _: Option<&weir_sdk::state::TimerFiring>,
        _: &mut [Batch],
        _: &mut weir_sdk::state::KeyedState,
        _: weir_sdk::state::StateTime,
        _: &dyn SideInputReader,
    ) -> UserResult {
        Ok(())
    }
    fn finish_bundle(&mut self, _: &mut [Batch]) -> UserResult {
        Ok(())
    }
    fn teardown(&mut self) -> UserResult {
        Ok(())
    }
}
