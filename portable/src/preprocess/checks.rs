//! What Weir runs of a submitted pipeline, checked before anything runs: each ParDo's features,
//! each windowing, each requirement. A refusal names the transform, its URN, and what to do
//! instead.

use crate::preprocess::{pc_name, sorted, unsupported, urn};
use crate::proto::pipeline::v1 as rapi;
use crate::Error;
use prost::Message;
use weir_sdk::state::TimeDomain;
use weir_sdk::urns;

/// Pipeline requirements Weir meets.
pub(crate) const REQUIREMENTS: [&str; 5] = [
    urns::requirements::TIME_SORTED_INPUT,
    urns::requirements::FINALIZATION,
    urns::requirements::SPLITTABLE_DOFN,
    urns::requirements::STATEFUL,
    urns::requirements::ON_WINDOW_EXPIRATION,
];

/// Transforms the harness runs.
pub(crate) const SDK_URNS: [&str; 13] = [
    urns::PAR_DO,
    urns::SDF_PAIR_WITH_RESTRICTION,
    urns::SDF_SPLIT_AND_SIZE,
    urns::SPLITTABLE_PROCESS,
    urns::WINDOW_INTO,
    urns::COMBINE_PRECOMBINE,
    urns::COMBINE_MERGE,
    urns::COMBINE_EXTRACT,
    urns::COMBINE_GROUPED_VALUES,
    urns::MAP_WINDOWS,
    urns::MERGE_WINDOWS,
    urns::TO_STRING,
    urns::FLATTEN,
];

/// Whether TestStream `t` reads its events from a service rather than carrying them.
pub(crate) fn test_stream_endpoint(t: &rapi::PTransform) -> bool {
    let payload = t.spec.as_ref().map_or(&[][..], |s| &s.payload[..]);
    rapi::TestStreamPayload::decode(payload).is_ok_and(|p| p.endpoint.as_ref().is_some_and(|e| !e.url.is_empty()))
}

/// Whether `t` runs a DoFn (a ParDo, or a part of an expanded splittable one).
pub fn runs_do_fn(t: &rapi::PTransform) -> bool {
    matches!(
        urn(t),
        urns::PAR_DO | urns::SDF_PAIR_WITH_RESTRICTION | urns::SDF_SPLIT_AND_SIZE | urns::SPLITTABLE_PROCESS
    )
}

/// Checks what a ParDo asks of the runner.
pub(crate) fn check_par_do(t: &rapi::PTransform) -> Result<rapi::ParDoPayload, Error> {
    let payload = t.spec.as_ref().map_or(&[][..], |s| &s.payload[..]);
    let p = rapi::ParDoPayload::decode(payload)
        .map_err(|e| unsupported(t, format!("a ParDo payload that does not decode: {e}")))?;
    let lacking = [
        // Expanded before planning ([`crate::preprocess::sdf`]): only its parts are left.
        (!p.restriction_coder_id.is_empty() && urn(t) == urns::PAR_DO, "splittable DoFns"),
        (p.requires_stable_input, "stable input"),
    ];
    if let Some((_, what)) = lacking.iter().find(|(needed, _)| *needed) {
        return Err(unsupported(
            t,
            format!("{what} are not supported by Weir's portable runner yet: run this step on another runner"),
        ));
    }
    for (id, spec) in sorted(&p.state_specs) {
        let protocol = spec.protocol.as_ref().map_or("", |f| f.urn.as_str());
        if !USER_STATE.contains(&protocol) {
            return Err(unsupported(
                t,
                format!("user state '{id}' is kept by protocol '{protocol}', which Weir lacks"),
            ));
        }
    }
    for (id, spec) in sorted(&p.timer_family_specs) {
        if time_domain(spec.time_domain).is_none() {
            return Err(unsupported(
                t,
                format!("timer family '{id}' follows a clock Weir lacks ({})", spec.time_domain),
            ));
        }
    }
    Ok(p)
}

/// The State API protocols of user state Weir keeps.
const USER_STATE: [&str; 3] = [urns::user_state::BAG, urns::user_state::MULTIMAP, urns::user_state::ORDERED_LIST];

/// Whether ParDo `t` keeps state or sets timers: its input is keyed, and it runs after Weir
/// routes each key to one place.
pub fn is_stateful(t: &rapi::PTransform) -> bool {
    urn(t) == urns::PAR_DO
        && t.spec
            .as_ref()
            .and_then(|s| rapi::ParDoPayload::decode(&s.payload[..]).ok())
            .is_some_and(|p| !p.state_specs.is_empty() || !p.timer_family_specs.is_empty())
}

/// Checks that Weir runs the windowing of PCollection `pc` (read or written by `t`): its window
/// function, trigger and the rest.
pub(crate) fn check_windowing(c: &rapi::Components, t: &rapi::PTransform, pc: &str) -> Result<String, Error> {
    let p = c.pcollections.get(pc).ok_or_else(|| Error::Malformed(format!("no PCollection '{pc}'")))?;
    let ws = c
        .windowing_strategies
        .get(&p.windowing_strategy_id)
        .ok_or_else(|| Error::Malformed(format!("no windowing strategy '{}'", p.windowing_strategy_id)))?;
    crate::preprocess::windowing::strategy(ws, &c.coders).map_err(|e| {
        let window_fn = ws.window_fn.as_ref().map_or("", |f| f.urn.as_str());
        let why = if crate::preprocess::windowing::is_known(window_fn) {
            format!("the windowing of {}: {e}", pc_name(c, pc))
        } else {
            format!(
                "PCollection {} is windowed by {window_fn}, a window function known only to the SDK: {e}",
                pc_name(c, pc)
            )
        };
        unsupported(t, why)
    })?;
    Ok(p.windowing_strategy_id.clone())
}

/// The clock of a timer family's `time_domain`; `None` for one Weir lacks.
pub fn time_domain(proto: i32) -> Option<TimeDomain> {
    use crate::proto::pipeline::v1::time_domain::Enum;
    match Enum::try_from(proto).ok()? {
        Enum::EventTime => Some(TimeDomain::EventTime),
        Enum::ProcessingTime => Some(TimeDomain::ProcessingTime),
        Enum::Unspecified => None,
    }
}
