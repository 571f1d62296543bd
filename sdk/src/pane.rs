//! Pane information: which firing of a window produced an element.

use serde::{Deserialize, Serialize};

/// When a pane fired relative to the watermark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Timing {
    /// Before the watermark passed the end of the window.
    Early = 0,
    /// The one firing when the watermark passed the end of the window.
    OnTime = 1,
    /// After the on-time pane, for late data.
    Late = 2,
    /// Not produced by a trigger firing.
    Unknown = 3,
}

impl Timing {
    /// Beam's name of the timing (`PaneInfo.Timing`): `EARLY`, `ON_TIME`, `LATE` or `UNKNOWN`.
    pub fn beam_name(self) -> &'static str {
        match self {
            Timing::Early => "EARLY",
            Timing::OnTime => "ON_TIME",
            Timing::Late => "LATE",
            Timing::Unknown => "UNKNOWN",
        }
    }
}

/// Beam's `PaneInfo`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PaneInfo {
    /// First pane of its window.
    pub is_first: bool,
    /// Last pane of its window.
    pub is_last: bool,
    /// Timing relative to the watermark.
    pub timing: Timing,
    /// Index of the pane among all panes of the window (0, 1, ...).
    pub index: i64,
    /// Index among non-early panes; -1 for early panes.
    pub non_speculative_index: i64,
}

impl PaneInfo {
    /// `PaneInfo.NO_FIRING`: elements that no trigger produced.
    pub const NO_FIRING: PaneInfo =
        PaneInfo { is_first: true, is_last: true, timing: Timing::Unknown, index: 0, non_speculative_index: 0 };
    /// `PaneInfo.ON_TIME_AND_ONLY_FIRING`.
    pub const ON_TIME_AND_ONLY_FIRING: PaneInfo =
        PaneInfo { is_first: true, is_last: true, timing: Timing::OnTime, index: 0, non_speculative_index: 0 };

    /// Appends Beam's PaneInfo encoding.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let low = (self.is_first as u8) | ((self.is_last as u8) << 1) | ((self.timing as u8) << 2);
        // PaneInfoCoder.Encoding.fromPane: FIRST, ONE_INDEX or TWO_INDICES.
        if self.index == 0 {
            out.push(low);
        } else if self.index == self.non_speculative_index || self.timing == Timing::Early {
            out.push(low | 0x10);
            crate::coders::write_varint(self.index as u64, out);
        } else {
            out.push(low | 0x20);
            crate::coders::write_varint(self.index as u64, out);
            crate::coders::write_varint(self.non_speculative_index as u64, out);
        }
    }

    /// Decodes Beam's PaneInfo encoding.
    pub fn decode(input: &mut &[u8]) -> Result<PaneInfo, crate::coders::CoderError> {
        let b = crate::coders::read_byte(input)?;
        let timing = match (b >> 2) & 3 {
            0 => Timing::Early,
            1 => Timing::OnTime,
            2 => Timing::Late,
            _ => Timing::Unknown,
        };
        let is_first = b & 1 != 0;
        let is_last = b & 2 != 0;
        let (index, nsi) = match b >> 4 {
            0 => (0, if timing == Timing::Early { -1 } else { 0 }),
            1 => {
                let i = crate::coders::read_varint(input)? as i64;
                (i, if timing == Timing::Early { -1 } else { i })
            }
            2 => {
                let i = crate::coders::read_varint(input)? as i64;
                (i, crate::coders::read_varint(input)? as i64)
            }
            e => return Err(crate::coders::CoderError::new(format!("unknown PaneInfo encoding {e}"))),
        };
        Ok(PaneInfo { is_first, is_last, timing, index, non_speculative_index: nsi })
    }
}
