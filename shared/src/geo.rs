//! A fixed node's geographic position (a station's, a datacenter's), which the operator knows
//! and configures. The control plane gives a few slots of each positioned node's peer list to
//! the positioned nodes geographically nearest ([`crate::coords::neighbours`]): on a railway,
//! neighbouring stations are joined by the fibre along the track, a pair under a millisecond
//! that the network coordinates over-estimate several times and that no other slot reaches in
//! a large fleet (BENCHMARKS.md, "Stations near on the map").
//!
//! Trains leave it unset: they move, and they reach everything through their radio link, so
//! where they are says nothing about which of their links are short.

use serde::{Deserialize, Serialize};

/// The Earth's mean radius, km.
pub const EARTH_RADIUS_KM: f64 = 6371.0;

/// Why a position was refused.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum GeoError {
    #[error("latitude {0} is not a number of degrees from -90 to 90")]
    Latitude(f64),
    #[error("longitude {0} is not a number of degrees from -180 to 180")]
    Longitude(f64),
}

/// A position in degrees (WGS 84 latitude and longitude; the height is left out): always
/// finite and in range.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawPosition", into = "RawPosition")]
pub struct Position {
    lat_deg: f64,
    lon_deg: f64,
}

/// [`Position`] as written (in a configuration file, a model): checked on the way in.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPosition {
    pub lat_deg: f64,
    pub lon_deg: f64,
}

// Always finite (checked on the way in), so equality is reflexive.
impl Eq for Position {}

impl TryFrom<RawPosition> for Position {
    type Error = GeoError;
    fn try_from(r: RawPosition) -> Result<Self, GeoError> {
        Position::new(r.lat_deg, r.lon_deg)
    }
}

impl From<Position> for RawPosition {
    fn from(p: Position) -> Self {
        RawPosition {
            lat_deg: p.lat_deg,
            lon_deg: p.lon_deg,
        }
    }
}

impl Position {
    /// A checked position: latitude in [-90, 90], longitude in [-180, 180] degrees.
    pub fn new(lat_deg: f64, lon_deg: f64) -> Result<Self, GeoError> {
        if !(lat_deg.is_finite() && (-90.0..=90.0).contains(&lat_deg)) {
            return Err(GeoError::Latitude(lat_deg));
        }
        if !(lon_deg.is_finite() && (-180.0..=180.0).contains(&lon_deg)) {
            return Err(GeoError::Longitude(lon_deg));
        }
        Ok(Position { lat_deg, lon_deg })
    }

    pub fn lat_deg(&self) -> f64 {
        self.lat_deg
    }

    pub fn lon_deg(&self) -> f64 {
        self.lon_deg
    }

    /// The point on a sphere of the Earth's mean radius, km from its centre (x towards
    /// 0° N 0° E, z towards the north pole): the straight-line distance between two such
    /// points orders pairs as the distance along the surface does.
    pub fn ecef_km(&self) -> [f64; 3] {
        let (lat, lon) = (self.lat_deg.to_radians(), self.lon_deg.to_radians());
        [
            EARTH_RADIUS_KM * lat.cos() * lon.cos(),
            EARTH_RADIUS_KM * lat.cos() * lon.sin(),
            EARTH_RADIUS_KM * lat.sin(),
        ]
    }

    /// The straight-line (chord) distance to `other`, km: within a fraction of a percent of
    /// the distance along the surface up to a few hundred km.
    pub fn chord_km(&self, other: &Position) -> f64 {
        crate::coords::euclidean(&self.ecef_km(), &other.ecef_km())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_out_of_range_is_refused_by_name() {
        assert_eq!(Position::new(91.0, 0.0), Err(GeoError::Latitude(91.0)));
        assert_eq!(Position::new(0.0, -180.5), Err(GeoError::Longitude(-180.5)));
        assert!(matches!(
            Position::new(f64::NAN, 0.0),
            Err(GeoError::Latitude(_))
        ));
        assert!(Position::new(-90.0, 180.0).is_ok());
        let e = serde_json::from_str::<Position>(r#"{"lat_deg": 47.0, "lon_deg": 200.0}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("longitude 200 is not"), "{e}");
        let e = serde_json::from_str::<Position>(r#"{"lat_deg": 47.0, "lon": 8.0}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `lon`"), "{e}");
    }

    #[test]
    fn the_chord_is_the_distance_on_the_map_for_near_stations() {
        // Zurich HB to Bern: about 95 km as the crow flies.
        let zurich = Position::new(47.3779, 8.5403).unwrap();
        let bern = Position::new(46.9490, 7.4391).unwrap();
        let d = zurich.chord_km(&bern);
        assert!((d - 95.0).abs() < 2.0, "{d}");
        // one degree of latitude: 111.2 km
        let a = Position::new(10.0, 20.0).unwrap();
        let b = Position::new(11.0, 20.0).unwrap();
        assert!((a.chord_km(&b) - 111.19).abs() < 0.1, "{}", a.chord_km(&b));
        assert_eq!(a.chord_km(&a), 0.0);
    }
}
