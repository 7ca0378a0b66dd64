//! A differential test against a real redis-server 7.0, run by hand:
//! `DMC_ACL_REDIS=127.0.0.1:7777 cargo test -p dmc-engine --lib acl::tests_redis --
//! --ignored`. Random rule sequences go to both (`ACL SETUSER`, one rule at a time:
//! same acceptance, same error text), then random calls of DMC's commands to both
//! (`ACL DRYRUN` there, [`User::check`] here): same decision, same key or channel
//! named; Redis's `ACL LIST` line of a user parses here to the same permissions, and
//! ours there to a user deciding alike; and `ACL CAT` lists the same commands. It creates and deletes users `dmc-acl-diff` and
//! `dmc-acl-diff-copy` on that server.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use bytes::Bytes;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::*;

struct Redis {
    out: TcpStream,
    input: BufReader<TcpStream>,
}

/// A reply, as far as this test needs one.
#[derive(Debug, Clone, PartialEq)]
enum R {
    Ok(String),
    Err(String),
}

impl Redis {
    fn connect(addr: &str) -> Redis {
        let out = TcpStream::connect(addr).expect("redis-server");
        let input = BufReader::new(out.try_clone().expect("clone"));
        Redis { out, input }
    }

    fn call(&mut self, args: &[&[u8]]) -> R {
        let mut req = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            req.extend_from_slice(a);
            req.extend_from_slice(b"\r\n");
        }
        self.out.write_all(&req).expect("write");
        self.read()
    }

    fn line(&mut self) -> String {
        let mut line = String::new();
        self.input.read_line(&mut line).expect("read");
        line.trim_end_matches("\r\n").to_string()
    }

    fn read(&mut self) -> R {
        let line = self.line();
        match line.split_at(1) {
            ("+", s) => R::Ok(s.to_string()),
            ("-", s) => R::Err(s.to_string()),
            (":", s) => R::Ok(s.to_string()),
            ("$", n) => {
                let n: usize = n.parse().expect("length");
                let mut buf = vec![0; n + 2];
                std::io::Read::read_exact(&mut self.input, &mut buf).expect("bulk");
                buf.truncate(n);
                R::Ok(String::from_utf8_lossy(&buf).into_owned())
            }
            ("*", n) => {
                let n: i64 = n.parse().expect("length");
                let items: Vec<String> = (0..n.max(0))
                    .map(|_| match self.read() {
                        R::Ok(s) | R::Err(s) => s,
                    })
                    .collect();
                R::Ok(items.join(" "))
            }
            _ => panic!("reply {line}"),
        }
    }
}

const NAME: &[u8] = b"dmc-acl-diff";
const COPY: &[u8] = b"dmc-acl-diff-copy";

/// DMC's own commands, and Redis 7.2's CLIENT SETINFO, are not Redis 7.0's.
fn redis_has(name: &str) -> bool {
    !name.starts_with("dmc.") && name != "client|setinfo"
}

#[test]
#[ignore = "needs a redis-server 7.0: DMC_ACL_REDIS=host:port"]
fn differential_against_redis() {
    let Ok(addr) = std::env::var("DMC_ACL_REDIS") else {
        return;
    };
    let mut conn = Redis::connect(&addr);
    // ACL CAT: every category holds the commands of DMC's it holds there.
    for c in Category::ALL {
        let R::Ok(theirs) = conn.call(&[b"ACL", b"CAT", c.name().as_bytes()]) else {
            panic!("ACL CAT {}", c.name());
        };
        let mut theirs: Vec<&str> = theirs
            .split(' ')
            .filter(|n| commands::UNIVERSE.lookup(n.as_bytes()).is_some())
            .collect();
        let mut ours: Vec<&str> = commands_in_category(c.name().as_bytes())
            .expect("a category")
            .into_iter()
            .filter(|n| redis_has(n))
            .collect();
        theirs.sort_unstable();
        ours.sort_unstable();
        assert_eq!(ours, theirs, "@{}", c.name());
    }
    let redis = std::cell::RefCell::new(conn);
    let tally = std::cell::RefCell::new([0usize; 4]);
    let vocabulary: Vec<String> = super::tests_model::rule_vocabulary()
        .into_iter()
        .filter(|r| redis_has(r.trim_start_matches(['+', '-'])) && !r.starts_with('('))
        .collect();
    let mut runner = TestRunner::new(Config::with_cases(400));
    // Broad rules first (categories, patterns), so that many calls get past the
    // command check, then any.
    let broad: Vec<String> = vocabulary
        .iter()
        .filter(|r| {
            r.starts_with(['~', '%', '&'])
                || r.starts_with("+@")
                || r.starts_with("-@")
                || r.starts_with("all")
        })
        .cloned()
        .collect();
    let strategy = (
        (
            proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
            proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        ),
        proptest::collection::vec(
            (
                any::<usize>(),
                proptest::collection::vec(any::<usize>(), 0..6),
            ),
            60,
        ),
    );
    runner
        .run(&strategy, |((broad_picks, picks), calls)| {
            let mut redis = redis.borrow_mut();
            redis.call(&[b"ACL", b"DELUSER", NAME]);
            redis.call(&[b"ACL", b"SETUSER", NAME]);
            let mut user = User::new(Bytes::from_static(NAME));
            let rules = broad_picks
                .iter()
                .map(|p| p.get(&broad))
                .chain(picks.iter().map(|p| p.get(&vocabulary)));
            for rule in rules {
                let theirs = redis.call(&[b"ACL", b"SETUSER", NAME, rule.as_bytes()]);
                let ours = match user.apply_rules(&[rule]) {
                    Ok(()) => R::Ok("OK".into()),
                    Err(e) => R::Err(e.to_string()),
                };
                prop_assert_eq!(ours, theirs, "rule {}", rule);
            }
            // ACL LIST: the same flags, passwords, keys and channels; Redis's command
            // rules, replayed here (less the commands DMC lacks), give our bitmap.
            let R::Ok(list) = redis.call(&[b"ACL", b"LIST"]) else {
                panic!("ACL LIST");
            };
            let theirs = list
                .split(" user ")
                .find_map(|l| l.trim_start_matches("user ").strip_prefix("dmc-acl-diff "))
                .expect("our user listed")
                .to_string();
            let ours = String::from_utf8_lossy(&user.describe()).into_owned();
            // Up to and with `+@all` or `-@all`, where the command rules start.
            let head = |s: &str| {
                let words: Vec<&str> = s.split(' ').collect();
                let end = words.iter().position(|w| *w == "+@all" || *w == "-@all");
                words[..=end.expect("command rules")].join(" ")
            };
            prop_assert_eq!(head(&ours), head(&theirs));
            let mut replay = User::new(Bytes::from_static(NAME));
            for rule in theirs
                .split(' ')
                .skip_while(|w| *w != "+@all" && *w != "-@all")
            {
                match replay.apply(rule.as_bytes()) {
                    Ok(()) | Err(RuleError::UnknownName) => {}
                    Err(e) => panic!("{rule}: {e}"),
                }
            }
            // Only for commands Redis 7.0 has: `+client` there cannot say CLIENT SETINFO.
            for id in 0..commands::UNIVERSE.len() {
                let name = &commands::UNIVERSE.item(id).name;
                if redis_has(name) {
                    prop_assert_eq!(
                        replay.perms.allowed.get(id),
                        user.perms.allowed.get(id),
                        "{}: {} vs {}",
                        name,
                        theirs,
                        ours
                    );
                }
            }
            // And our rules, given to Redis, make the same user there.
            let ours_there: Vec<&[u8]> = ours
                .split(' ')
                .filter(|w| redis_has(w.trim_start_matches(['+', '-'])))
                .map(str::as_bytes)
                .collect();
            redis.call(&[b"ACL", b"DELUSER", COPY]);
            let mut req: Vec<&[u8]> = vec![b"ACL", b"SETUSER", COPY];
            req.extend(ours_there);
            prop_assert_eq!(redis.call(&req), R::Ok("OK".into()), "{}", ours);
            let R::Ok(list) = redis.call(&[b"ACL", b"LIST"]) else {
                panic!("ACL LIST");
            };
            let copy = list
                .split(" user ")
                .find_map(|l| {
                    l.trim_start_matches("user ")
                        .strip_prefix("dmc-acl-diff-copy ")
                })
                .expect("the copy listed");
            // The same but for the command rules: DMC fits categories over its own
            // commands (`+@bitmap` adds none here), so those read differently; the
            // copy must decide every call alike (below).
            prop_assert_eq!(head(copy), head(&theirs), "ours: {}", ours);
            for (row, picks) in &calls {
                let (spec, args) = super::tests_model::call(*row, picks);
                if !redis_has(spec.name) {
                    continue;
                }
                let mut req: Vec<&[u8]> = vec![b"ACL", b"DRYRUN", NAME];
                req.extend(args.iter().map(|a| &a[..]));
                let theirs = match redis.call(&req) {
                    // Redis's lookup refuses what DMC's container answers itself.
                    R::Err(e) if e.contains("not found") || e.contains("wrong number") => {
                        continue;
                    }
                    r => r,
                };
                req[2] = COPY;
                prop_assert_eq!(redis.call(&req), theirs.clone(), "copy, {:?}", args);
                let checked = user.check(spec, &args);
                tally.borrow_mut()[match &checked {
                    Ok(()) => 0,
                    Err(Denied::Command(_)) => 1,
                    Err(Denied::Key(_)) => 2,
                    Err(Denied::Channel(_)) => 3,
                }] += 1;
                let ours = match checked {
                    Ok(()) => R::Ok("OK".into()),
                    Err(d) => R::Ok(d.dryrun_text()),
                };
                prop_assert_eq!(
                    ours,
                    theirs,
                    "{:?} by {}",
                    args,
                    String::from_utf8_lossy(&user.describe())
                );
            }
            Ok(())
        })
        .expect("DMC decides as redis-server");
    redis.borrow_mut().call(&[b"ACL", b"DELUSER", NAME, COPY]);
    let [ok, command, key, channel] = *tally.borrow();
    eprintln!(
        "same decisions: {ok} allowed, refused {command} command, {key} key, {channel} channel"
    );
    assert!(
        ok > 0 && command > 0 && key > 0 && channel > 0,
        "every outcome compared"
    );
}
