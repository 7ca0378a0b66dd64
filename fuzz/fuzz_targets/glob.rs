//! The glob matcher on arbitrary patterns and keys: never a panic or a deep stack, and
//! the same answer as a memoised recursive reference of Redis's `stringmatchlen`
//! (polynomial, so the fuzzer may try long inputs).

#![no_main]

use dmc_engine::glob::glob;
use libfuzzer_sys::fuzz_target;

/// Redis's recursive matcher, memoised on (pattern position, text position).
fn reference(pattern: &[u8], text: &[u8], nocase: bool) -> bool {
    let mut memo = vec![None; (pattern.len() + 1) * (text.len() + 1)];
    // Work stack of (p, t) states still to resolve, evaluated bottom-up.
    fn eval(
        p: usize,
        t: usize,
        pattern: &[u8],
        text: &[u8],
        nocase: bool,
        memo: &mut Vec<Option<bool>>,
    ) -> bool {
        let w = text.len() + 1;
        if let Some(v) = memo[p * w + t] {
            return v;
        }
        let eq = |a: u8, b: u8| if nocase { a.eq_ignore_ascii_case(&b) } else { a == b };
        let v = if p == pattern.len() {
            t == text.len()
        } else if pattern[p] == b'*' {
            eval(p + 1, t, pattern, text, nocase, memo)
                || (t < text.len() && eval(p, t + 1, pattern, text, nocase, memo))
        } else if t == text.len() {
            false
        } else {
            let c = text[t];
            let (ok, next) = match pattern[p] {
                b'?' => (true, p + 1),
                b'[' => {
                    let mut q = p + 1;
                    let negate = pattern.get(q) == Some(&b'^');
                    if negate {
                        q += 1;
                    }
                    let fold = |b: u8| if nocase { b.to_ascii_lowercase() } else { b };
                    let mut hit = false;
                    loop {
                        match pattern.get(q) {
                            None => break,
                            Some(b']') => {
                                q += 1;
                                break;
                            }
                            Some(b'\\') if q + 1 < pattern.len() => {
                                hit |= pattern[q + 1] == c;
                                q += 2;
                            }
                            Some(&lo) if q + 2 < pattern.len() && pattern[q + 1] == b'-' => {
                                let hi = pattern[q + 2];
                                hit |= (fold(lo.min(hi))..=fold(lo.max(hi))).contains(&fold(c));
                                q += 3;
                            }
                            Some(&b) => {
                                hit |= fold(b) == fold(c);
                                q += 1;
                            }
                        }
                    }
                    (hit != negate, q)
                }
                b'\\' if p + 1 < pattern.len() => (eq(pattern[p + 1], c), p + 2),
                lit => (eq(lit, c), p + 1),
            };
            ok && eval(next, t + 1, pattern, text, nocase, memo)
        };
        memo[p * w + t] = Some(v);
        v
    }
    eval(0, 0, pattern, text, nocase, &mut memo)
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let split = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    let (pattern, text) = (&rest[..split], rest.get(split + 1..).unwrap_or_default());
    let nocase = flags & 1 == 1;
    let got = glob(pattern, text, nocase);
    // The reference recurses along the pattern and text: keep them modest for it.
    if pattern.len() <= 64 && text.len() <= 64 {
        assert_eq!(got, reference(pattern, text, nocase), "{pattern:?} {text:?}");
    }
});
