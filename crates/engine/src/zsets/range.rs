//! ZRANGE and its kin: parsing `ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT
//! offset count] [WITHSCORES]` and the older forms into one [`RangeQuery`] (which
//! [`super::stored::ZSet::select`] answers), and the reply's shape.

use bytes::Bytes;
use dmc_resp::Reply;

use super::value::{LexBound, LexRange, ScoreBound, ScoreRange};
use crate::{NOT_INTEGER, SYNTAX, parse_i64};

/// What a range selects by.
#[derive(Debug, Clone, PartialEq)]
pub enum By {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange),
}

/// A parsed range query.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeQuery {
    pub by: By,
    pub rev: bool,
    /// `LIMIT offset count` (a negative count: all).
    pub limit: Option<(i64, i64)>,
    pub with_scores: bool,
}

/// Which command's syntax the arguments follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// ZRANGE and ZRANGESTORE: `min max` then options.
    Range,
    /// ZREVRANGE: `start stop [WITHSCORES]`.
    RevRank,
    ByScore {
        rev: bool,
    },
    ByLex {
        rev: bool,
    },
}

const NOT_FLOAT: &str = "ERR min or max is not a float";
const NOT_LEX: &str = "ERR min or max not valid string range item";

fn score_range(min: &[u8], max: &[u8]) -> Result<ScoreRange, Reply> {
    match (ScoreBound::parse(min), ScoreBound::parse(max)) {
        (Some(min), Some(max)) => Ok(ScoreRange { min, max }),
        _ => Err(Reply::err(NOT_FLOAT)),
    }
}

fn lex_range(min: &Bytes, max: &Bytes) -> Result<LexRange, Reply> {
    match (LexBound::parse(min), LexBound::parse(max)) {
        (Some(min), Some(max)) => Ok(LexRange { min, max }),
        _ => Err(Reply::err(NOT_LEX)),
    }
}

/// Parses a range query whose `start`/`min` is `args[0]`, `stop`/`max` `args[1]` and
/// options follow.
pub fn parse(form: Form, args: &[Bytes]) -> Result<RangeQuery, Reply> {
    let (a, b) = (&args[0], &args[1]);
    let (mut by_score, mut by_lex, mut rev) = match form {
        Form::Range => (false, false, false),
        Form::RevRank => (false, false, true),
        Form::ByScore { rev } => (true, false, rev),
        Form::ByLex { rev } => (false, true, rev),
    };
    let (mut limit, mut with_scores) = (None, false);
    let mut i = 2;
    while i < args.len() {
        let opt = args[i].to_ascii_uppercase();
        match &opt[..] {
            b"BYSCORE" if form == Form::Range && !by_lex => by_score = true,
            b"BYLEX" if form == Form::Range && !by_score => by_lex = true,
            b"REV" if form == Form::Range => rev = true,
            b"WITHSCORES" if !matches!(form, Form::ByLex { .. }) => with_scores = true,
            b"LIMIT" if form != Form::RevRank => {
                let (Some(o), Some(c)) = (args.get(i + 1), args.get(i + 2)) else {
                    return Err(Reply::err(SYNTAX));
                };
                let (Some(o), Some(c)) = (parse_i64(o), parse_i64(c)) else {
                    return Err(Reply::err(NOT_INTEGER));
                };
                limit = Some((o, c));
                i += 2;
            }
            _ => return Err(Reply::err(SYNTAX)),
        }
        i += 1;
    }
    if limit.is_some() && !by_score && !by_lex {
        return Err(Reply::err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if with_scores && by_lex {
        return Err(Reply::err(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    // REV and the reverse commands give the range as max, min.
    let (lo, hi) = if rev && (by_score || by_lex) {
        (b, a)
    } else {
        (a, b)
    };
    let by = if by_score {
        By::Score(score_range(lo, hi)?)
    } else if by_lex {
        By::Lex(lex_range(lo, hi)?)
    } else {
        match (parse_i64(a), parse_i64(b)) {
            (Some(s), Some(e)) => By::Rank(s, e),
            _ => return Err(Reply::err(NOT_INTEGER)),
        }
    };
    Ok(RangeQuery {
        by,
        rev,
        limit,
        with_scores,
    })
}

/// A range's reply: members, with their scores when asked (RESP3: pairs).
pub fn reply(items: Vec<(Bytes, f64)>, with_scores: bool, proto: u8) -> Reply {
    if !with_scores {
        return Reply::Array(items.into_iter().map(|(m, _)| Reply::Bulk(m)).collect());
    }
    if proto >= 3 {
        return Reply::Array(
            items
                .into_iter()
                .map(|(m, s)| Reply::Array(vec![Reply::Bulk(m), Reply::Double(s)]))
                .collect(),
        );
    }
    let mut out = Vec::with_capacity(items.len() * 2);
    for (m, s) in items {
        out.push(Reply::Bulk(m));
        out.push(Reply::Double(s));
    }
    Reply::Array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &str) -> Vec<Bytes> {
        words
            .split(' ')
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    fn set() -> Vec<(Bytes, f64)> {
        [("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 4.0)]
            .iter()
            .map(|(m, s)| (Bytes::from(*m), *s))
            .collect()
    }

    fn members(q: &str, form: Form) -> Vec<String> {
        let q = parse(form, &args(q)).expect("a valid query");
        let mut z = super::super::value::ZSetValue::default();
        for (m, s) in set() {
            z.insert(m, s);
        }
        let z = super::super::stored::ZSet::Packed(z);
        let picked = futures::executor::block_on(z.select(&q)).expect("a packed set");
        picked
            .into_iter()
            .map(|(m, _)| String::from_utf8_lossy(&m).into_owned())
            .collect()
    }

    #[test]
    fn ranges_select_as_redis_does() {
        assert_eq!(members("0 -1", Form::Range), ["a", "b", "c", "d"]);
        assert_eq!(members("0 1 REV", Form::Range), ["d", "c"]);
        assert_eq!(members("(1 3 BYSCORE", Form::Range), ["b", "c"]);
        assert_eq!(
            members("+inf -inf BYSCORE REV LIMIT 1 2", Form::Range),
            ["c", "b"]
        );
        assert_eq!(members("[b (d BYLEX", Form::Range), ["b", "c"]);
        assert_eq!(
            members("- + LIMIT 0 -1", Form::ByLex { rev: false }),
            ["a", "b", "c", "d"]
        );
        assert_eq!(members("3 1", Form::ByScore { rev: true }), ["c", "b", "a"]);
        assert!(parse(Form::Range, &args("0 1 LIMIT 0 1")).is_err());
        assert!(parse(Form::Range, &args("- + BYLEX WITHSCORES")).is_err());
        assert!(parse(Form::Range, &args("x 1 BYSCORE")).is_err());
    }
}
