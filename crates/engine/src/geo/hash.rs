//! Redis's geohash arithmetic (`geohash.c`, `geohash_helper.c` of Redis 7.0), ported
//! so that DMC stores, finds and measures points exactly as Redis does: a point is a
//! sorted-set member whose score is its 52-bit interleaved geohash (26 steps of
//! latitude and longitude bits); a search scans the score ranges of the geohash box
//! around the centre and its eight neighbours at a step chosen from the radius, and
//! keeps the points inside the shape by the haversine distance on Redis's earth radius.
//! Pure functions, no I/O; the trigonometry is the platform's libm, as Redis's is.

pub const STEP_MAX: u8 = 26;
pub const LAT_MIN: f64 = -85.05112878;
pub const LAT_MAX: f64 = 85.05112878;
pub const LONG_MIN: f64 = -180.0;
pub const LONG_MAX: f64 = 180.0;
const EARTH_RADIUS_IN_METERS: f64 = 6372797.560856;
const MERCATOR_MAX: f64 = 20037726.37;
const D_R: f64 = std::f64::consts::PI / 180.0;

/// A geohash of `step` steps (2 × step bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Bits {
    pub bits: u64,
    pub step: u8,
}

impl Bits {
    fn is_zero(self) -> bool {
        self.bits == 0 && self.step == 0
    }
}

/// A range of longitudes or latitudes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

/// The cell a geohash covers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Area {
    pub longitude: Range,
    pub latitude: Range,
}

const WGS84_LONG: Range = Range {
    min: LONG_MIN,
    max: LONG_MAX,
};
const WGS84_LAT: Range = Range {
    min: LAT_MIN,
    max: LAT_MAX,
};

fn interleave64(xlo: u32, ylo: u32) -> u64 {
    const B: [u64; 5] = [
        0x5555555555555555,
        0x3333333333333333,
        0x0F0F0F0F0F0F0F0F,
        0x00FF00FF00FF00FF,
        0x0000FFFF0000FFFF,
    ];
    const S: [u32; 5] = [1, 2, 4, 8, 16];
    let (mut x, mut y) = (u64::from(xlo), u64::from(ylo));
    for i in (0..5).rev() {
        x = (x | (x << S[i])) & B[i];
        y = (y | (y << S[i])) & B[i];
    }
    x | (y << 1)
}

fn deinterleave64(interleaved: u64) -> u64 {
    const B: [u64; 6] = [
        0x5555555555555555,
        0x3333333333333333,
        0x0F0F0F0F0F0F0F0F,
        0x00FF00FF00FF00FF,
        0x0000FFFF0000FFFF,
        0x00000000FFFFFFFF,
    ];
    const S: [u32; 6] = [0, 1, 2, 4, 8, 16];
    let (mut x, mut y) = (interleaved, interleaved >> 1);
    for i in 0..6 {
        x = (x | (x >> S[i])) & B[i];
        y = (y | (y >> S[i])) & B[i];
    }
    x | (y << 32)
}

/// `geohashEncode`: `None` outside the ranges (or Redis's WGS84 limits).
pub fn encode(long_range: Range, lat_range: Range, lon: f64, lat: f64, step: u8) -> Option<Bits> {
    if step == 0 || step > 32 {
        return None;
    }
    if !(LONG_MIN..=LONG_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return None;
    }
    if lat < lat_range.min || lat > lat_range.max || lon < long_range.min || lon > long_range.max {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_offset = (lat - lat_range.min) / (lat_range.max - lat_range.min) * scale;
    let long_offset = (lon - long_range.min) / (long_range.max - long_range.min) * scale;
    Some(Bits {
        // C converts the doubles to uint32_t: truncation toward zero.
        bits: interleave64(lat_offset as u32, long_offset as u32),
        step,
    })
}

/// The 52-bit score of a point (`geohashEncodeWGS84` at 26 steps, aligned).
pub fn score(lon: f64, lat: f64) -> Option<u64> {
    encode(WGS84_LONG, WGS84_LAT, lon, lat, STEP_MAX).map(align52)
}

/// `geohashDecode`.
pub fn decode(long_range: Range, lat_range: Range, hash: Bits) -> Option<Area> {
    if hash.is_zero() {
        return None;
    }
    let sep = deinterleave64(hash.bits);
    let lat_scale = lat_range.max - lat_range.min;
    let long_scale = long_range.max - long_range.min;
    let ilato = sep as u32;
    let ilono = (sep >> 32) as u32;
    let div = (1u64 << hash.step) as f64;
    Some(Area {
        latitude: Range {
            min: lat_range.min + (f64::from(ilato) / div) * lat_scale,
            max: lat_range.min + ((f64::from(ilato) + 1.0) / div) * lat_scale,
        },
        longitude: Range {
            min: long_range.min + (f64::from(ilono) / div) * long_scale,
            max: long_range.min + ((f64::from(ilono) + 1.0) / div) * long_scale,
        },
    })
}

/// A score's point: the centre of its cell, clamped to the WGS84 limits
/// (`decodeGeohash` of `geo.c`).
pub fn point(score: f64) -> Option<(f64, f64)> {
    let hash = Bits {
        bits: score as u64,
        step: STEP_MAX,
    };
    let area = decode(WGS84_LONG, WGS84_LAT, hash)?;
    let lon = ((area.longitude.min + area.longitude.max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((area.latitude.min + area.latitude.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    Some((lon, lat))
}

/// GEOHASH's 11-character text of a score: its point re-encoded with the standard
/// latitude range (±90), the 11th character from zero bits.
pub fn text(score: f64) -> Option<String> {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let (lon, lat) = point(score)?;
    let full_lat = Range {
        min: -90.0,
        max: 90.0,
    };
    let hash = encode(WGS84_LONG, full_lat, lon, lat, STEP_MAX)?;
    Some(
        (0..11)
            .map(|i| {
                let idx = if i == 10 {
                    0
                } else {
                    (hash.bits >> (52 - (i + 1) * 5)) & 0x1f
                };
                char::from(ALPHABET[idx as usize])
            })
            .collect(),
    )
}

fn align52(hash: Bits) -> u64 {
    hash.bits << (52 - u32::from(hash.step) * 2)
}

fn move_x(hash: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let mut x = hash.bits & 0xaaaaaaaaaaaaaaaa;
    let y = hash.bits & 0x5555555555555555;
    let zz = 0x5555555555555555u64 >> (64 - u32::from(hash.step) * 2);
    if d > 0 {
        x = x.wrapping_add(zz + 1);
    } else {
        x |= zz;
        x = x.wrapping_sub(zz + 1);
    }
    x &= 0xaaaaaaaaaaaaaaaa >> (64 - u32::from(hash.step) * 2);
    hash.bits = x | y;
}

fn move_y(hash: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let x = hash.bits & 0xaaaaaaaaaaaaaaaa;
    let mut y = hash.bits & 0x5555555555555555;
    let zz = 0xaaaaaaaaaaaaaaaau64 >> (64 - u32::from(hash.step) * 2);
    if d > 0 {
        y = y.wrapping_add(zz + 1);
    } else {
        y |= zz;
        y = y.wrapping_sub(zz + 1);
    }
    y &= 0x5555555555555555 >> (64 - u32::from(hash.step) * 2);
    hash.bits = x | y;
}

fn moved(hash: Bits, dx: i8, dy: i8) -> Bits {
    let mut h = hash;
    move_x(&mut h, dx);
    move_y(&mut h, dy);
    h
}

/// A search shape, in meters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Shape {
    Radius(f64),
    Box { width: f64, height: f64 },
}

fn deg_rad(a: f64) -> f64 {
    a * D_R
}

fn rad_deg(a: f64) -> f64 {
    a / D_R
}

fn estimate_steps(range_meters: f64, lat: f64) -> u8 {
    if range_meters == 0.0 {
        return 26;
    }
    let mut range = range_meters;
    let mut step: i32 = 1;
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

/// `geohashBoundingBox`: min lon, min lat, max lon, max lat.
fn bounding_box(lon: f64, lat: f64, shape: Shape) -> [f64; 4] {
    let (height, width) = match shape {
        Shape::Radius(r) => (r, r),
        Shape::Box { width, height } => (height / 2.0, width / 2.0),
    };
    let lat_delta = rad_deg(height / EARTH_RADIUS_IN_METERS);
    let long_delta_top = rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(lat + lat_delta).cos());
    let long_delta_bottom =
        rad_deg(width / EARTH_RADIUS_IN_METERS / deg_rad(lat - lat_delta).cos());
    let southern = lat < 0.0;
    let delta = if southern {
        long_delta_bottom
    } else {
        long_delta_top
    };
    [lon - delta, lat - lat_delta, lon + delta, lat + lat_delta]
}

/// The `[min, max)` score ranges a search around (`lon`, `lat`) scans, in Redis's
/// order (the centre's box, then north, south, east, west, north-east, north-west,
/// south-east, south-west), without the boxes Redis leaves out and without a box equal
/// to the one scanned before it (`geohashCalculateAreasByShapeWGS84` and
/// `membersOfAllNeighbors`).
pub fn search_ranges(lon: f64, lat: f64, shape: Shape) -> Vec<(u64, u64)> {
    let [min_lon, min_lat, max_lon, max_lat] = bounding_box(lon, lat, shape);
    let radius = match shape {
        Shape::Radius(r) => r,
        Shape::Box { width, height } => ((width / 2.0).powi(2) + (height / 2.0).powi(2)).sqrt(),
    };
    let mut steps = estimate_steps(radius, lat);
    let Some(mut hash) = encode(WGS84_LONG, WGS84_LAT, lon, lat, steps) else {
        return Vec::new();
    };
    let neighbours = |h: Bits| {
        [
            moved(h, 0, 1),   // north
            moved(h, 0, -1),  // south
            moved(h, 1, 0),   // east
            moved(h, -1, 0),  // west
            moved(h, 1, 1),   // north east
            moved(h, -1, 1),  // north west
            moved(h, 1, -1),  // south east
            moved(h, -1, -1), // south west
        ]
    };
    let mut n = neighbours(hash);
    let area_of = |h: Bits| decode(WGS84_LONG, WGS84_LAT, h);
    let short = |n: &[Bits; 8]| {
        let (north, south, east, west) =
            (area_of(n[0]), area_of(n[1]), area_of(n[2]), area_of(n[3]));
        north.is_some_and(|a| a.latitude.max < max_lat)
            || south.is_some_and(|a| a.latitude.min > min_lat)
            || east.is_some_and(|a| a.longitude.max < max_lon)
            || west.is_some_and(|a| a.longitude.min > min_lon)
    };
    if steps > 1 && short(&n) {
        steps -= 1;
        if let Some(h) = encode(WGS84_LONG, WGS84_LAT, lon, lat, steps) {
            hash = h;
            n = neighbours(hash);
        }
    }
    if steps >= 2
        && let Some(area) = area_of(hash)
    {
        let zero = Bits::default();
        if area.latitude.min < min_lat {
            n[1] = zero;
            n[7] = zero;
            n[6] = zero;
        }
        if area.latitude.max > max_lat {
            n[0] = zero;
            n[4] = zero;
            n[5] = zero;
        }
        if area.longitude.min < min_lon {
            n[3] = zero;
            n[7] = zero;
            n[5] = zero;
        }
        if area.longitude.max > max_lon {
            n[2] = zero;
            n[6] = zero;
            n[4] = zero;
        }
    }
    let boxes = std::iter::once(hash).chain(n);
    let mut out = Vec::with_capacity(9);
    // Redis compares a box with the last one scanned only once that is not the centre
    // (its `last_processed` index starts at 0, which reads as "none").
    let mut last: Option<Bits> = None;
    for (i, b) in boxes.enumerate() {
        if b.is_zero() {
            continue;
        }
        if last == Some(b) {
            continue;
        }
        let b_is_centre = i == 0;
        let min = align52(b);
        let max = align52(Bits {
            bits: b.bits + 1,
            step: b.step,
        });
        out.push((min, max));
        last = (!b_is_centre).then_some(b);
    }
    out
}

fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_IN_METERS * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// `geohashGetDistance`: the haversine distance in meters.
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let lon1r = deg_rad(lon1);
    let lon2r = deg_rad(lon2);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let lat1r = deg_rad(lat1);
    let lat2r = deg_rad(lat2);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_IN_METERS * a.sqrt().asin()
}

/// The distance from the centre when (`lon`, `lat`) is inside `shape` around it.
pub fn within(shape: Shape, clon: f64, clat: f64, lon: f64, lat: f64) -> Option<f64> {
    match shape {
        Shape::Radius(r) => {
            let d = distance(clon, clat, lon, lat);
            (d <= r).then_some(d)
        }
        Shape::Box { width, height } => {
            if lat_distance(lat, clat) > height / 2.0 {
                return None;
            }
            if distance(lon, lat, clon, lat) > width / 2.0 {
                return None;
            }
            Some(distance(clon, clat, lon, lat))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_documentation_points() {
        // GEOADD Sicily 13.361389 38.115556 "Palermo" 15.087269 37.502669 "Catania".
        let palermo = score(13.361389, 38.115556).unwrap();
        let catania = score(15.087269, 37.502669).unwrap();
        assert_eq!(palermo, 3479099956230698);
        assert_eq!(catania, 3479447370796909);
        let (lon, lat) = point(palermo as f64).unwrap();
        assert_eq!(format!("{lon:.17}"), "13.36138933897018433");
        assert_eq!(format!("{lat:.17}"), "38.11555639549629859");
        assert_eq!(text(palermo as f64).unwrap(), "sqc8b49rny0");
        let (clon, clat) = point(catania as f64).unwrap();
        let d = distance(lon, lat, clon, clat);
        assert_eq!(format!("{:.4}", d / 1000.0), "166.2742");
        assert!(score(200.0, 10.0).is_none());
        assert!(score(0.0, 86.0).is_none());
    }

    #[test]
    fn interleaving_round_trips() {
        for (x, y) in [
            (0u32, 0u32),
            (1, 2),
            (u32::MAX, 0),
            (0x1234_5678, 0x9abc_def0),
        ] {
            let sep = deinterleave64(interleave64(x, y));
            assert_eq!((sep as u32, (sep >> 32) as u32), (x, y));
        }
    }

    #[test]
    fn a_search_around_a_point_scans_its_box_first() {
        let ranges = search_ranges(15.0, 37.0, Shape::Radius(200_000.0));
        assert!(!ranges.is_empty() && ranges.len() <= 9);
        let centre = score(15.0, 37.0).unwrap();
        let (min, max) = ranges[0];
        assert!(min <= centre && centre < max, "{ranges:?}");
    }
}
