//! A node's network coordinate on the wire (v5): [`crate::coords::DIMS`] components, a height
//! and an error estimate, as `f32`. Carried in
//! [`LinkMetrics::coord`](crate::wire::LinkMetrics::coord) and, packed in 20 bytes
//! ([`WireCoord::to_bytes`]), in the agents' probe pongs. A coordinate off the wire is
//! checked before use ([`WireCoord::to_coord`]: finite, height and error non-negative).

use serde::{Deserialize, Serialize};

use super::WireError;
use crate::coords::{Coord, DIMS};

/// Bytes of a packed coordinate: `DIMS + 2` big-endian `f32`.
pub const COORD_BYTES: usize = 4 * (DIMS + 2);

/// A coordinate as reported (milliseconds, see [`crate::coords`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WireCoord {
    pub vec: [f32; DIMS],
    pub height: f32,
    pub error: f32,
}

impl WireCoord {
    pub fn from_coord(c: &Coord<DIMS>) -> Self {
        let mut vec = [0f32; DIMS];
        for (o, x) in vec.iter_mut().zip(c.vec()) {
            *o = *x as f32;
        }
        WireCoord {
            vec,
            height: c.height() as f32,
            error: c.error() as f32,
        }
    }

    /// The checked coordinate, or an error naming what is wrong.
    pub fn to_coord(&self) -> Result<Coord<DIMS>, WireError> {
        let mut vec = [0f64; DIMS];
        for (o, x) in vec.iter_mut().zip(self.vec) {
            *o = f64::from(x);
        }
        Coord::new(vec, f64::from(self.height), f64::from(self.error))
            .map_err(|e| WireError::BadCoord(e.to_string()))
    }

    /// `vec`, `height`, `error` as big-endian `f32`.
    pub fn to_bytes(&self) -> [u8; COORD_BYTES] {
        let mut out = [0u8; COORD_BYTES];
        let all = self.vec.iter().chain([&self.height, &self.error]);
        for (chunk, x) in out.chunks_exact_mut(4).zip(all) {
            chunk.copy_from_slice(&x.to_be_bytes());
        }
        out
    }

    /// The inverse of [`WireCoord::to_bytes`] (not checked: see [`WireCoord::to_coord`]);
    /// `None` when `b` is not [`COORD_BYTES`] long.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        if b.len() != COORD_BYTES {
            return None;
        }
        let mut f = [0f32; DIMS + 2];
        for (x, chunk) in f.iter_mut().zip(b.chunks_exact(4)) {
            *x = f32::from_be_bytes(chunk.try_into().ok()?);
        }
        let mut vec = [0f32; DIMS];
        vec.copy_from_slice(&f[..DIMS]);
        Some(WireCoord {
            vec,
            height: f[DIMS],
            error: f[DIMS + 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coordinates_round_trip_and_bad_ones_are_named() {
        let c = Coord::new([1.5, -2.0, 30.25], 4.5, 0.25).unwrap();
        let w = WireCoord::from_coord(&c);
        assert_eq!(w.to_coord().unwrap(), c);
        assert_eq!(WireCoord::from_bytes(&w.to_bytes()), Some(w));
        assert_eq!(WireCoord::from_bytes(&[0; 3]), None);
        let bad = WireCoord { height: -1.0, ..w };
        let e = bad.to_coord().unwrap_err();
        assert!(
            e.to_string().starts_with("node coordinate: height -1"),
            "{e}"
        );
        let nan = WireCoord {
            vec: [0.0, f32::NAN, 0.0],
            ..w
        };
        assert!(nan
            .to_coord()
            .unwrap_err()
            .to_string()
            .contains("component 1"));
    }
}
