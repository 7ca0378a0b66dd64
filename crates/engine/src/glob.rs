//! Redis's glob patterns (`stringmatchlen`): `*`, `?`, `[...]` with ranges and `^`,
//! and `\\` escapes. Used by KEYS, SCAN MATCH and CONFIG GET; a leaf that every family
//! may import.

/// Redis's `stringmatchlen` glob: `*`, `?`, `[...]` (ranges, `^`), `\` escapes.
pub fn glob(pattern: &[u8], text: &[u8], nocase: bool) -> bool {
    let eq = |a: u8, b: u8| {
        if nocase {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    match (pattern.first(), text.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob(&pattern[1..], text, nocase)
                || (!text.is_empty() && glob(pattern, &text[1..], nocase))
        }
        (Some(b'?'), Some(_)) => glob(&pattern[1..], &text[1..], nocase),
        (Some(b'['), Some(&c)) => {
            let Some(close) = pattern
                .iter()
                .skip(1)
                .position(|&b| b == b']')
                .map(|p| p + 1)
            else {
                return false;
            };
            let class = &pattern[1..close];
            let (neg, class) = match class.first() {
                Some(b'^') => (true, &class[1..]),
                _ => (false, class),
            };
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    let (lo, hi) = (class[i].min(class[i + 2]), class[i].max(class[i + 2]));
                    let c = if nocase { c.to_ascii_lowercase() } else { c };
                    hit |= (lo..=hi).contains(&c);
                    i += 3;
                } else {
                    hit |= eq(class[i], c);
                    i += 1;
                }
            }
            hit != neg && glob(&pattern[close + 1..], &text[1..], nocase)
        }
        (Some(b'\\'), Some(&c)) if pattern.len() > 1 => {
            eq(pattern[1], c) && glob(&pattern[2..], &text[1..], nocase)
        }
        (Some(&p), Some(&c)) => eq(p, c) && glob(&pattern[1..], &text[1..], nocase),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::glob;

    #[test]
    fn globs() {
        assert!(glob(b"*", b"maxmemory", true));
        assert!(glob(b"maxmemory*", b"maxmemory-policy", true));
        assert!(glob(b"MAXMEMORY", b"maxmemory", true));
        assert!(
            !glob(b"MAXMEMORY", b"maxmemory", false),
            "KEYS patterns are case-sensitive"
        );
        assert!(glob(b"m?xmemory", b"maxmemory", true));
        assert!(glob(b"[ab]ppendonly", b"appendonly", false));
        assert!(glob(b"key:[0-9]*", b"key:42", false));
        assert!(!glob(b"save?", b"save", false));
        assert!(glob(b"a\\*b", b"a*b", false));
    }
}
