//! Redis's glob patterns (`stringmatchlen`): `*`, `?`, `[...]` with ranges, `^` and
//! escapes, and `\` escapes. Used by KEYS, SCAN MATCH and CONFIG GET; a leaf that every
//! family may import.
//!
//! The matcher is iterative and never recurses: runs of `*` collapse into one, and on a
//! mismatch only the last `*` seen is retried one byte further (a later `*` can match
//! anything an earlier one could, so older ones never need retrying). A match therefore
//! costs at most `pattern × text` steps whatever the pattern, where the recursive form
//! Redis fixed for CVE-2022-36021 is exponential in the number of stars and its depth
//! is the pattern's length.

/// One single-byte token of the pattern at `p` against byte `c`: whether it matches,
/// and where the next token starts. `p` is not at a `*`.
fn token(pattern: &[u8], p: usize, c: u8, nocase: bool) -> (bool, usize) {
    let eq = |a: u8, b: u8| {
        if nocase {
            a.eq_ignore_ascii_case(&b)
        } else {
            a == b
        }
    };
    match pattern[p] {
        b'?' => (true, p + 1),
        b'[' => class(pattern, p + 1, c, nocase),
        b'\\' if p + 1 < pattern.len() => (eq(pattern[p + 1], c), p + 2),
        lit => (eq(lit, c), p + 1),
    }
}

/// A `[...]` class starting after its `[` at `p`, as Redis reads it: `^` negates, `\`
/// escapes, `a-z` is a range (either order), and an unterminated class runs to the end
/// of the pattern.
fn class(pattern: &[u8], mut p: usize, c: u8, nocase: bool) -> (bool, usize) {
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let fold = |b: u8| if nocase { b.to_ascii_lowercase() } else { b };
    let mut hit = false;
    loop {
        match pattern.get(p) {
            None => break,
            Some(b']') => {
                p += 1;
                break;
            }
            Some(b'\\') if p + 1 < pattern.len() => {
                hit |= pattern[p + 1] == c;
                p += 2;
            }
            Some(&lo) if p + 2 < pattern.len() && pattern[p + 1] == b'-' => {
                let hi = pattern[p + 2];
                let (lo, hi) = (fold(lo.min(hi)), fold(lo.max(hi)));
                hit |= (lo..=hi).contains(&fold(c));
                p += 3;
            }
            Some(&b) => {
                hit |= fold(b) == fold(c);
                p += 1;
            }
        }
    }
    (hit != negate, p)
}

/// Whether `text` matches `pattern` (Redis's `stringmatchlen`).
pub fn glob(pattern: &[u8], text: &[u8], nocase: bool) -> bool {
    let (mut p, mut t) = (0, 0);
    // After the last `*`: where its pattern continues, and the text it has consumed to.
    let mut star: Option<(usize, usize)> = None;
    loop {
        if pattern.get(p) == Some(&b'*') {
            while pattern.get(p) == Some(&b'*') {
                p += 1;
            }
            if p == pattern.len() {
                return true;
            }
            star = Some((p, t));
            continue;
        }
        if t == text.len() {
            return p == pattern.len();
        }
        if p < pattern.len() {
            let (ok, next) = token(pattern, p, text[t], nocase);
            if ok {
                p = next;
                t += 1;
                continue;
            }
        }
        // Mismatch (or pattern used up with text left): the last star takes one more
        // byte, and everything after it is tried again from there.
        match star {
            Some((after, taken)) if taken < text.len() => {
                star = Some((after, taken + 1));
                p = after;
                t = taken + 1;
            }
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::glob;
    use proptest::prelude::*;

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
        assert!(!glob(b"a\\*b", b"axb", false));
        assert!(glob(b"h[^e]llo", b"hallo", false) && !glob(b"h[^e]llo", b"hello", false));
        assert!(glob(b"h[a-b]llo", b"hbllo", false) && glob(b"h[b-a]llo", b"hallo", false));
        assert!(glob(b"", b"", false) && !glob(b"", b"a", false) && glob(b"**", b"", false));
        // Redis reads an unterminated class to the end of the pattern.
        assert!(glob(b"a[bc", b"ab", false));
        assert!(glob(b"a\\", b"a\\", false));
    }

    /// The glob bombs of issue 13 finish at once: 100 000 stars (the recursive matcher
    /// overflowed the stack), and many stars against a key they cannot match (the
    /// recursive matcher backtracked for longer than 20 s).
    #[test]
    fn glob_bombs_are_cheap() {
        let stars = vec![b'*'; 100_000];
        assert!(glob(&stars, b"anything", true));
        let mut bomb = stars.clone();
        bomb.push(b'x');
        assert!(!glob(&bomb, &[b'a'; 64], false));
        assert!(!glob(b"*a*a*a*a*a*a*a*a*a*a*a*a*b", &[b'a'; 64], false));
        let long = [b'a'; 10_000];
        assert!(!glob(
            &b"*a"
                .repeat(5_000)
                .into_iter()
                .chain(*b"*b")
                .collect::<Vec<_>>(),
            &long,
            false
        ));
        let text = vec![b'a'; 1 << 16];
        assert!(glob(b"*a*a*?*", &text, false));
    }

    /// Redis's recursive `stringmatchlen`, as the oracle for small inputs.
    fn reference(pattern: &[u8], text: &[u8], nocase: bool) -> bool {
        let eq = |a: u8, b: u8| {
            if nocase {
                a.eq_ignore_ascii_case(&b)
            } else {
                a == b
            }
        };
        let Some(&first) = pattern.first() else {
            return text.is_empty();
        };
        match first {
            b'*' => {
                let rest = &pattern[1..];
                (0..=text.len()).any(|i| reference(rest, &text[i..], nocase))
            }
            _ if text.is_empty() => false,
            b'?' => reference(&pattern[1..], &text[1..], nocase),
            b'[' => {
                let c = text[0];
                let mut p = 1;
                let negate = pattern.get(p) == Some(&b'^');
                if negate {
                    p += 1;
                }
                let fold = |b: u8| if nocase { b.to_ascii_lowercase() } else { b };
                let mut hit = false;
                loop {
                    if p >= pattern.len() {
                        break;
                    }
                    if pattern[p] == b'\\' && p + 1 < pattern.len() {
                        hit |= pattern[p + 1] == c;
                        p += 2;
                    } else if pattern[p] == b']' {
                        p += 1;
                        break;
                    } else if p + 2 < pattern.len() && pattern[p + 1] == b'-' {
                        let (lo, hi) = (
                            pattern[p].min(pattern[p + 2]),
                            pattern[p].max(pattern[p + 2]),
                        );
                        hit |= (fold(lo)..=fold(hi)).contains(&fold(c));
                        p += 3;
                    } else {
                        hit |= fold(pattern[p]) == fold(c);
                        p += 1;
                    }
                }
                hit != negate && reference(&pattern[p..], &text[1..], nocase)
            }
            b'\\' if pattern.len() > 1 => {
                eq(pattern[1], text[0]) && reference(&pattern[2..], &text[1..], nocase)
            }
            lit => eq(lit, text[0]) && reference(&pattern[1..], &text[1..], nocase),
        }
    }

    proptest! {
        /// The iterative matcher answers what Redis's recursive one does.
        #[test]
        fn matches_the_recursive_reference(
            pattern in proptest::collection::vec(
                prop::sample::select(b"ab*?[]^-\\A".to_vec()), 0..10),
            text in proptest::collection::vec(prop::sample::select(b"abAB-]*".to_vec()), 0..10),
            nocase in any::<bool>(),
        ) {
            prop_assert_eq!(glob(&pattern, &text, nocase), reference(&pattern, &text, nocase));
        }
    }
}
