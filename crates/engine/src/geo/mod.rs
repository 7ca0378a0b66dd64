//! The geo family on sorted sets: GEOADD, GEODIST, GEOHASH, GEOPOS, GEOSEARCH,
//! GEOSEARCHSTORE and GEORADIUS / GEORADIUSBYMEMBER (and their `_RO` forms), with Redis
//! 7.0's options, replies and error texts (`geo.c`). A point is a member whose score is
//! its geohash ([`hash`]); GEOADD is ZADD of those scores, a search reads the score
//! ranges of the geohash boxes around the centre (at most nine range reads of the
//! sorted set, wherever it is stored) and keeps the points inside the shape.
//!
//! Results are sorted with a stable sort, which is Redis's order whenever it returns
//! every result (glibc's merge sort); when COUNT cuts the list Redis uses a partial
//! quicksort, so points at exactly equal distances may come in another order.

pub mod hash;
mod units;

use bytes::Bytes;
use dmc_resp::Reply;

use crate::table::GeoCmd;
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, error_reply, parse_i64};
use hash::Shape;

/// Redis's `getDoubleFromObject` (`string2d`: glibc `strtod` on the whole text).
fn parse_double(arg: &[u8]) -> Option<f64> {
    units::parse_coordinate(arg)
}

/// A longitude, latitude pair inside Redis's limits.
fn lon_lat(args: &[Bytes]) -> Result<(f64, f64), Reply> {
    let (Some(lon), Some(lat)) = (
        args.first().and_then(|a| parse_double(a)),
        args.get(1).and_then(|a| parse_double(a)),
    ) else {
        return Err(Reply::err("ERR value is not a valid float"));
    };
    if !(hash::LONG_MIN..=hash::LONG_MAX).contains(&lon)
        || !(hash::LAT_MIN..=hash::LAT_MAX).contains(&lat)
    {
        return Err(Reply::Error(format!(
            "ERR invalid longitude,latitude pair {lon:.6},{lat:.6}"
        )));
    }
    Ok((lon, lat))
}

/// Meters per unit.
fn unit(arg: &[u8]) -> Result<f64, Reply> {
    units::unit_factor(arg)
        .ok_or_else(|| Reply::err("ERR unsupported unit provided. please use M, KM, FT, MI"))
}

/// `radius unit`: the radius and meters per unit.
fn distance_arg(args: &[Bytes]) -> Result<(f64, f64), Reply> {
    let r = parse_double(&args[0]).ok_or_else(|| Reply::err("ERR need numeric radius"))?;
    if r < 0.0 {
        return Err(Reply::err("ERR radius cannot be negative"));
    }
    Ok((r, unit(&args[1])?))
}

/// Redis's `fixedpoint_d2string(d, 4)`: rounded half to even at 4 decimals.
fn fixed4(d: f64) -> String {
    if d == 0.0 {
        return "0.0000".into();
    }
    let v = (d * 10000.0).round_ties_even() as i64;
    let sign = if v < 0 { "-" } else { "" };
    let a = v.unsigned_abs();
    format!("{sign}{}.{:04}", a / 10000, a % 10000)
}

/// A coordinate as Redis replies it: RESP2 its "human" long double text (17 decimals,
/// trailing zeros removed), RESP3 a double.
fn coordinate(d: f64, proto: u8) -> Reply {
    if proto >= 3 {
        return Reply::Double(d);
    }
    let mut s = format!("{d:.17}");
    if s.contains('.') {
        let trimmed = s.trim_end_matches('0').trim_end_matches('.').len();
        s.truncate(trimmed);
    }
    if s == "-0" {
        s = "0".into();
    }
    Reply::bulk(s)
}

pub async fn run(engine: &Engine, s: &mut Session, cmd: GeoCmd, args: &[Bytes]) -> Reply {
    let db = engine.physical_db(s.db);
    let result = match cmd {
        GeoCmd::GeoAdd => geoadd(engine, db, args).await,
        GeoCmd::GeoPos => geopos(engine, s, db, args).await,
        GeoCmd::GeoHash => geohash(engine, db, args).await,
        GeoCmd::GeoDist => geodist(engine, db, args).await,
        GeoCmd::GeoRadius
        | GeoCmd::GeoRadiusRo
        | GeoCmd::GeoRadiusByMember
        | GeoCmd::GeoRadiusByMemberRo
        | GeoCmd::GeoSearch
        | GeoCmd::GeoSearchStore => search(engine, s, db, cmd, args).await,
    };
    result.unwrap_or_else(|r| r)
}

async fn geoadd(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let mut at = 2;
    let (mut nx, mut xx) = (false, false);
    while at < args.len() {
        let o = &args[at];
        if o.eq_ignore_ascii_case(b"nx") {
            nx = true;
        } else if o.eq_ignore_ascii_case(b"xx") {
            xx = true;
        } else if !o.eq_ignore_ascii_case(b"ch") {
            break;
        }
        at += 1;
    }
    if !(args.len() - at).is_multiple_of(3) || (nx && xx) {
        return Err(Reply::err(SYNTAX));
    }
    let mut zadd: Vec<Bytes> = vec![Bytes::from_static(b"zadd")];
    zadd.extend_from_slice(&args[1..at]);
    for point in args[at..].chunks(3) {
        let (lon, lat) = lon_lat(point)?;
        let score = hash::score(lon, lat).ok_or_else(|| Reply::err(SYNTAX))?;
        zadd.push(Bytes::from(score.to_string()));
        zadd.push(point[2].clone());
    }
    Ok(crate::zsets::add(engine, db, &zadd).await)
}

async fn geopos(engine: &Engine, s: &Session, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let scores = crate::zsets::scores(engine, db, &args[1], &args[2..]).await?;
    Ok(Reply::Array(
        scores
            .into_iter()
            .map(|sc| match sc.and_then(hash::point) {
                Some((lon, lat)) => {
                    Reply::Array(vec![coordinate(lon, s.proto), coordinate(lat, s.proto)])
                }
                None => Reply::NullArray,
            })
            .collect(),
    ))
}

async fn geohash(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let scores = crate::zsets::scores(engine, db, &args[1], &args[2..]).await?;
    Ok(Reply::Array(
        scores
            .into_iter()
            .map(|sc| sc.and_then(hash::text).map_or(Reply::Null, Reply::bulk))
            .collect(),
    ))
}

async fn geodist(engine: &Engine, db: u8, args: &[Bytes]) -> Result<Reply, Reply> {
    let to_meters = match args.len() {
        4 => 1.0,
        5 => unit(&args[4])?,
        _ => return Err(Reply::err(SYNTAX)),
    };
    let scores = crate::zsets::scores(engine, db, &args[1], &args[2..4]).await?;
    let (Some(Some(a)), Some(Some(b))) = (scores.first(), scores.get(1)) else {
        return Ok(Reply::Null);
    };
    let (Some((lon1, lat1)), Some((lon2, lat2))) = (hash::point(*a), hash::point(*b)) else {
        return Ok(Reply::Null);
    };
    Ok(Reply::bulk(fixed4(
        hash::distance(lon1, lat1, lon2, lat2) / to_meters,
    )))
}

/// A point a search found.
struct Found {
    member: Bytes,
    /// Meters from the centre.
    dist: f64,
    score: f64,
    lon: f64,
    lat: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    None,
    Asc,
    Desc,
}

/// The parsed options of a search command.
struct Search {
    centre: Option<(f64, f64)>,
    /// `FROMMEMBER` of a missing key: answered empty.
    from_member_of_nothing: bool,
    shape: Option<Shape>,
    /// Meters per unit of the shape's numbers.
    unit: f64,
    with_dist: bool,
    with_hash: bool,
    with_coord: bool,
    any: bool,
    count: u64,
    order: Order,
    store: Option<(Bytes, bool)>,
}

async fn member_point(
    engine: &Engine,
    db: u8,
    key: &Bytes,
    m: &Bytes,
) -> Result<(f64, f64), Reply> {
    let score = crate::zsets::scores(engine, db, key, std::slice::from_ref(m))
        .await?
        .into_iter()
        .next()
        .flatten();
    score
        .and_then(hash::point)
        .ok_or_else(|| Reply::err("ERR could not decode requested zset member"))
}

async fn parse_search(
    engine: &Engine,
    db: u8,
    cmd: GeoCmd,
    args: &[Bytes],
    src: &Bytes,
    src_exists: bool,
) -> Result<Search, Reply> {
    let mut q = Search {
        centre: None,
        from_member_of_nothing: false,
        shape: None,
        unit: 1.0,
        with_dist: false,
        with_hash: false,
        with_coord: false,
        any: false,
        count: 0,
        order: Order::None,
        store: None,
    };
    let geosearch = matches!(cmd, GeoCmd::GeoSearch | GeoCmd::GeoSearchStore);
    let store_allowed = matches!(cmd, GeoCmd::GeoRadius | GeoCmd::GeoRadiusByMember);
    let base = match cmd {
        GeoCmd::GeoRadius | GeoCmd::GeoRadiusRo => {
            q.centre = Some(lon_lat(&args[2..4])?);
            let (r, u) = distance_arg(&args[4..6])?;
            q.shape = Some(Shape::Radius(r));
            q.unit = u;
            6
        }
        GeoCmd::GeoRadiusByMember | GeoCmd::GeoRadiusByMemberRo => {
            if src_exists {
                q.centre = Some(member_point(engine, db, src, &args[2]).await?);
                let (r, u) = distance_arg(&args[3..5])?;
                q.shape = Some(Shape::Radius(r));
                q.unit = u;
            }
            5
        }
        GeoCmd::GeoSearch => 2,
        _ => {
            q.store = Some((args[1].clone(), false));
            3
        }
    };
    let rest = &args[base..];
    let (mut from_member, mut from_lonlat, mut by_radius, mut by_box) =
        (false, false, false, false);
    let mut i = 0;
    while i < rest.len() {
        let a = &rest[i];
        let left = rest.len() - i - 1;
        let is = |w: &[u8]| a.eq_ignore_ascii_case(w);
        if is(b"withdist") {
            q.with_dist = true;
        } else if is(b"withhash") {
            q.with_hash = true;
        } else if is(b"withcoord") {
            q.with_coord = true;
        } else if is(b"any") {
            q.any = true;
        } else if is(b"asc") {
            q.order = Order::Asc;
        } else if is(b"desc") {
            q.order = Order::Desc;
        } else if is(b"count") && left >= 1 {
            let n = parse_i64(&rest[i + 1]).ok_or_else(|| Reply::err(NOT_INTEGER))?;
            if n <= 0 {
                return Err(Reply::err("ERR COUNT must be > 0"));
            }
            q.count = n as u64;
            i += 1;
        } else if (is(b"store") || is(b"storedist")) && left >= 1 && store_allowed {
            q.store = Some((rest[i + 1].clone(), is(b"storedist")));
            i += 1;
        } else if is(b"storedist") && cmd == GeoCmd::GeoSearchStore {
            q.store = Some((args[1].clone(), true));
        } else if is(b"frommember") && left >= 1 && geosearch && !from_lonlat {
            if src_exists {
                q.centre = Some(member_point(engine, db, src, &rest[i + 1]).await?);
            } else {
                q.from_member_of_nothing = true;
            }
            from_member = true;
            i += 1;
        } else if is(b"fromlonlat") && left >= 2 && geosearch && !from_member {
            q.centre = Some(lon_lat(&rest[i + 1..i + 3])?);
            from_lonlat = true;
            i += 2;
        } else if is(b"byradius") && left >= 2 && geosearch && !by_box {
            let (r, u) = distance_arg(&rest[i + 1..i + 3])?;
            q.shape = Some(Shape::Radius(r));
            q.unit = u;
            by_radius = true;
            i += 2;
        } else if is(b"bybox") && left >= 3 && geosearch && !by_radius {
            let w =
                parse_double(&rest[i + 1]).ok_or_else(|| Reply::err("ERR need numeric width"))?;
            let h =
                parse_double(&rest[i + 2]).ok_or_else(|| Reply::err("ERR need numeric height"))?;
            if w < 0.0 || h < 0.0 {
                return Err(Reply::err("ERR height or width cannot be negative"));
            }
            q.unit = unit(&rest[i + 3])?;
            q.shape = Some(Shape::Box {
                width: w,
                height: h,
            });
            by_box = true;
            i += 3;
        } else {
            return Err(Reply::err(SYNTAX));
        }
        i += 1;
    }
    Ok(q)
}

async fn search(
    engine: &Engine,
    s: &Session,
    db: u8,
    cmd: GeoCmd,
    args: &[Bytes],
) -> Result<Reply, Reply> {
    let src = if cmd == GeoCmd::GeoSearchStore {
        &args[2]
    } else {
        &args[1]
    };
    let src_exists = match engine.read_stored(db, src).await.map_err(error_reply)? {
        Some((dmc_dht::ValueKind::ZSet, _)) => true,
        Some(_) => return Err(error_reply(dmc_dht::DhtError::WrongType)),
        None => false,
    };
    let q = parse_search(engine, db, cmd, args, src, src_exists).await?;
    let geosearch = matches!(cmd, GeoCmd::GeoSearch | GeoCmd::GeoSearchStore);
    if q.store.is_some() && (q.with_dist || q.with_hash || q.with_coord) {
        return Err(Reply::Error(format!(
            "ERR {} is not compatible with WITHDIST, WITHHASH and WITHCOORD options",
            if cmd == GeoCmd::GeoSearchStore {
                "GEOSEARCHSTORE"
            } else {
                "STORE option in GEORADIUS"
            }
        )));
    }
    let name = String::from_utf8_lossy(&args[0]);
    if geosearch && q.centre.is_none() && !q.from_member_of_nothing {
        return Err(Reply::Error(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        )));
    }
    if geosearch && q.shape.is_none() {
        return Err(Reply::Error(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        )));
    }
    if q.any && q.count == 0 {
        return Err(Reply::err("ERR the ANY argument requires COUNT argument"));
    }
    let _held = match &q.store {
        Some((dst, _)) => Some(engine.lock_key(dst).await),
        None => None,
    };
    let (Some((clon, clat)), Some(shape), true) = (q.centre, q.shape, src_exists) else {
        return Ok(match &q.store {
            Some((dst, _)) => {
                crate::collection::store(engine, db, dst, (dmc_dht::ValueKind::ZSet, "del"), None)
                    .await?;
                Reply::Int(0)
            }
            None => Reply::Array(Vec::new()),
        });
    };
    let meters = match shape {
        Shape::Radius(r) => Shape::Radius(r * q.unit),
        Shape::Box { width, height } => Shape::Box {
            width: width * q.unit,
            height: height * q.unit,
        },
    };
    let limit = if q.any { q.count } else { 0 };
    // ANY reads a box a page at a time and stops at COUNT points, as Redis stops its
    // scan; otherwise every member of the box is read at once.
    let page = if limit > 0 {
        limit.clamp(16, 256)
    } else {
        u64::MAX
    };
    let mut found: Vec<Found> = Vec::new();
    for (min, max) in hash::search_ranges(clon, clat, meters) {
        if limit > 0 && found.len() as u64 >= limit {
            break;
        }
        crate::zsets::scan_score_range(engine, db, src, (min as f64, max as f64), page, |items| {
            for (member, score) in items {
                let Some((lon, lat)) = hash::point(score) else {
                    continue;
                };
                if let Some(dist) = hash::within(meters, clon, clat, lon, lat) {
                    found.push(Found {
                        member,
                        dist,
                        score,
                        lon,
                        lat,
                    });
                }
                if limit > 0 && found.len() as u64 >= limit {
                    return false;
                }
            }
            true
        })
        .await?;
    }
    let order = if q.count > 0 && q.order == Order::None && !q.any {
        Order::Asc
    } else {
        q.order
    };
    match order {
        Order::Asc => found.sort_by(|a, b| a.dist.total_cmp(&b.dist)),
        Order::Desc => found.sort_by(|a, b| b.dist.total_cmp(&a.dist)),
        Order::None => {}
    }
    if q.count > 0 {
        found.truncate(usize::try_from(q.count).unwrap_or(usize::MAX));
    }
    if let Some((dst, store_dist)) = &q.store {
        let items: Vec<(Bytes, f64)> = found
            .into_iter()
            .map(|f| {
                let score = if *store_dist {
                    f.dist / q.unit
                } else {
                    f.score
                };
                (f.member, score)
            })
            .collect();
        let event = if geosearch {
            "geosearchstore"
        } else {
            "georadiusstore"
        };
        return Ok(crate::zsets::store(engine, db, dst, items, event).await);
    }
    let options = q.with_dist || q.with_hash || q.with_coord;
    Ok(Reply::Array(
        found
            .into_iter()
            .map(|f| {
                if !options {
                    return Reply::Bulk(f.member);
                }
                let mut item = vec![Reply::Bulk(f.member)];
                if q.with_dist {
                    item.push(Reply::bulk(fixed4(f.dist / q.unit)));
                }
                if q.with_hash {
                    item.push(Reply::Int(f.score as i64));
                }
                if q.with_coord {
                    item.push(Reply::Array(vec![
                        coordinate(f.lon, s.proto),
                        coordinate(f.lat, s.proto),
                    ]));
                }
                Reply::Array(item)
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_redis_prints_them() {
        assert_eq!(fixed4(166.27415156960033), "166.2742");
        assert_eq!(fixed4(0.0), "0.0000");
        assert_eq!(fixed4(0.00005), "0.0000");
        assert_eq!(fixed4(-1.23456), "-1.2346");
        assert_eq!(
            coordinate(13.361389338970184, 2),
            Reply::bulk("13.36138933897018433")
        );
        assert_eq!(coordinate(15.0, 2), Reply::bulk("15"));
        assert_eq!(parse_double(b" 1"), None);
        assert_eq!(parse_double(b"nan"), None);
        assert_eq!(parse_double(b"1e999"), None);
        assert_eq!(parse_double(b"-inf"), Some(f64::NEG_INFINITY));
    }
}
