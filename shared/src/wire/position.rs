//! A fixed node's position on the wire (v7): latitude and longitude in degrees as `f32` (a
//! metre or two of precision), carried in [`NodeReport::position`](crate::wire::NodeReport)
//! and checked before use ([`WirePosition::to_position`]).

use serde::{Deserialize, Serialize};

use super::WireError;
use crate::geo::Position;

/// A position as reported.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WirePosition {
    pub lat_deg: f32,
    pub lon_deg: f32,
}

impl WirePosition {
    pub fn from_position(p: &Position) -> Self {
        WirePosition {
            lat_deg: p.lat_deg() as f32,
            lon_deg: p.lon_deg() as f32,
        }
    }

    /// The checked position, or an error naming what is wrong.
    pub fn to_position(&self) -> Result<Position, WireError> {
        Position::new(f64::from(self.lat_deg), f64::from(self.lon_deg))
            .map_err(|e| WireError::BadPosition(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_crosses_the_wire_to_a_metre_and_a_bad_one_is_named() {
        let p = Position::new(47.377_912, 8.540_192).unwrap();
        let back = WirePosition::from_position(&p).to_position().unwrap();
        assert!(p.chord_km(&back) < 0.002, "{} km", p.chord_km(&back));
        let bad = WirePosition {
            lat_deg: f32::NAN,
            lon_deg: 8.0,
        };
        let e = bad.to_position().unwrap_err().to_string();
        assert!(e.starts_with("node position: latitude NaN"), "{e}");
    }
}
