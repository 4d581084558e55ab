//! `routing: geoproximity` rules: where each endpoint is, from its `coordinates` or the
//! latency-table region named by its `location` (the regions `performance` uses).

use super::profiles::Builder;
use super::raw::{Loc, RawEndpoint, RawProfile};
use crate::diag::Pos;
use crate::model::{Coordinates, Rules};

type RawEndpoints = Loc<Vec<Loc<RawEndpoint>>>;

impl Builder<'_, '_> {
    pub(super) fn geoproximity(&mut self, raw: &RawProfile, eps: &RawEndpoints) -> Rules {
        let sites = eps.value.iter().map(|ep| self.site(raw, ep)).collect();
        Rules::Geoproximity { sites }
    }

    /// One endpoint's coordinates; an error names what is missing or out of range (and
    /// the point is then 0, 0: the load fails anyway).
    fn site(&mut self, raw: &RawProfile, ep: &Loc<RawEndpoint>) -> Coordinates {
        let nowhere = Coordinates { latitude: 0.0, longitude: 0.0 };
        let e = &ep.value;
        match (&e.coordinates, &e.location) {
            (Some(_), Some(l)) => {
                self.sink.on(l, "give coordinates or location, not both");
                nowhere
            }
            (Some(c), None) => {
                let lat = degrees(self, &c.value.latitude, "latitude", 90.0);
                let lon = degrees(self, &c.value.longitude, "longitude", 180.0);
                Coordinates { latitude: lat, longitude: lon }
            }
            (None, Some(l)) => {
                let region = self.region(raw, Some(l), Pos::of(ep));
                self.world
                    .latency
                    .as_ref()
                    .and_then(|t| t.regions().get(region))
                    .map_or(nowhere, |r| Coordinates { latitude: r.lat, longitude: r.lon })
            }
            (None, None) => {
                self.sink.on(
                    ep,
                    "geoproximity endpoints need coordinates: { latitude, longitude } or \
                     location: (a latency-table region)",
                );
                nowhere
            }
        }
    }
}

/// `v` when it is a number within ±`max` degrees; else an error, and 0.
fn degrees(b: &mut Builder<'_, '_>, v: &Loc<f64>, key: &str, max: f64) -> f64 {
    if v.value.is_finite() && v.value.abs() <= max {
        v.value
    } else {
        b.sink.on(v, format!("{key} must be between -{max} and {max}, got {}", v.value));
        0.0
    }
}
