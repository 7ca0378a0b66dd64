//! Property tests: random `ACL SETUSER` rule sequences render (`ACL LIST`, `ACL
//! GETUSER`) and parse back to a user that decides every call alike; the ACL file
//! round-trips; the check never panics, whatever the call.

use bytes::Bytes;
use proptest::prelude::*;

use super::*;
use crate::table::{Spec, TABLE};

/// Rules of every kind, including ones that fail.
pub(super) fn rule_vocabulary() -> Vec<String> {
    let mut rules: Vec<String> = [
        "on",
        "off",
        "nopass",
        "resetpass",
        "reset",
        "sanitize-payload",
        "skip-sanitize-payload",
        "clearselectors",
        "",
        ">p1",
        ">p2",
        "<p1",
        "<p2",
        "!x",
        "~app:*",
        "~*",
        "%R~r:*",
        "%W~w:*",
        "%RW~x",
        "%R~*",
        "%W~app:*",
        "~a?c",
        "%R",
        "allkeys",
        "resetkeys",
        "&chan:*",
        "&*",
        "&c?",
        "&c1",
        "allchannels",
        "resetchannels",
        "+@all",
        "-@all",
        "allcommands",
        "nocommands",
        "+select|0",
        "+select|1",
        "+debug|sleep",
        "+get|x",
        "+config|get|x",
        "+nosuch",
        "+config|nosuch",
        "foo",
        "(~x +get)",
        "+client|setinfo",
        "-client|kill",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    rules.push(format!("#{}", hash_password(b"p3")));
    rules.push(format!("!{}", hash_password(b"p1")));
    for c in Category::ALL {
        rules.push(format!("+@{}", c.name()));
        rules.push(format!("-@{}", c.name()));
    }
    // The commands of DMC's table (ACL's own rows wait for an `acl` row).
    for e in categories::COMMANDS
        .iter()
        .filter(|e| commands::UNIVERSE.lookup(e.name.as_bytes()).is_some())
    {
        rules.push(format!("+{}", e.name));
        rules.push(format!("-{}", e.name));
    }
    rules
}

/// Argument values the calls are made of.
const ARGS: &[&str] = &[
    "app:1", "r:1", "w:1", "x", "other", "chan:1", "chan:*", "c1", "0", "1", "2", "get", "GET",
    "set", "id", "encoding", "usage", "help", "kill", "nosuch", "setinfo",
];

/// A call of table row `row` fitting its arity, from `picks` into [`ARGS`].
pub(super) fn call(row: usize, picks: &[usize]) -> (&'static Spec, Vec<Bytes>) {
    let spec = &TABLE[row % TABLE.len()];
    let want = if spec.arity > 0 {
        spec.arity as usize - 1
    } else {
        (-spec.arity) as usize - 1 + picks.len() % 3
    };
    let mut args = vec![Bytes::from_static(spec.name.as_bytes())];
    args.extend((0..want).map(|i| {
        Bytes::from_static(ARGS[picks.get(i).copied().unwrap_or(i) % ARGS.len()].as_bytes())
    }));
    (spec, args)
}

fn apply_all(rules: &[String]) -> User {
    let mut u = User::new(Bytes::from_static(b"u"));
    for r in rules {
        // One rule is atomic: a refused one changes nothing.
        let before = u.clone();
        if u.apply(r.as_bytes()).is_err() {
            assert_eq!(u, before, "{r} failed half-way");
        }
    }
    u
}

fn reparse(u: &User) -> User {
    let text = u.describe();
    let rules: Vec<&[u8]> = text.split(|&b| b == b' ').collect();
    let mut again = User::new(u.name().clone());
    again
        .apply_rules(&rules)
        .unwrap_or_else(|e| panic!("{} does not parse: {e}", String::from_utf8_lossy(&text)));
    again
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn rules_render_and_parse_back_to_the_same_user(
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 0..14),
        calls in proptest::collection::vec(
            (any::<usize>(), proptest::collection::vec(any::<usize>(), 0..6)), 40),
    ) {
        let vocabulary = rule_vocabulary();
        let rules: Vec<String> = picks.iter().map(|i| i.get(&vocabulary).clone()).collect();
        let u = apply_all(&rules);
        let again = reparse(&u);
        prop_assert_eq!(again.describe(), u.describe(), "rules {:?}", rules);
        prop_assert_eq!(again.getuser_reply(), u.getuser_reply());
        prop_assert_eq!(&again.perms.allowed, &u.perms.allowed);
        prop_assert_eq!(again.flags(), u.flags());
        prop_assert_eq!(again.password_hashes(), u.password_hashes());
        for (row, args) in &calls {
            let (spec, args) = call(*row, args);
            prop_assert_eq!(
                again.check(spec, &args), u.check(spec, &args),
                "rules {:?}, call {:?}", rules, args
            );
        }
        // `ACL SETUSER` of the same rules, all at once, gives the same user when
        // every rule is valid.
        if rules.iter().all(|r| User::new(Bytes::new()).apply(r.as_bytes()).is_ok()) {
            let mut users = Users::default();
            if let Ok(set) = users.setuser(b"u", &rules) {
                prop_assert_eq!(set.describe(), u.describe());
            }
        }
    }

    #[test]
    fn the_acl_file_round_trips(
        users_rules in proptest::collection::vec(
            proptest::collection::vec(any::<prop::sample::Index>(), 0..8), 0..5),
    ) {
        let vocabulary = rule_vocabulary();
        let mut users = Users::new(Some(b"pw"));
        for (i, picks) in users_rules.iter().enumerate() {
            let rules: Vec<String> = picks.iter().map(|p| p.get(&vocabulary).clone()).collect();
            let u = apply_all(&rules);
            let name = format!("user{i}");
            users.setuser(name.as_bytes(), &u.describe().split(|&b| b == b' ').collect::<Vec<_>>())
                .expect("a described user loads");
        }
        let text = users.to_acl_file();
        let again = Users::from_acl_file(&text, "users.acl").expect("loads");
        prop_assert_eq!(again.list(), users.list());
    }

    /// Whatever the user and the call (arity or not), the check answers.
    #[test]
    fn the_check_never_panics(
        picks in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        row in any::<usize>(),
        args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..6), 0..6),
    ) {
        let vocabulary = rule_vocabulary();
        let rules: Vec<String> = picks.iter().map(|i| i.get(&vocabulary).clone()).collect();
        let u = apply_all(&rules);
        let spec = &TABLE[row % TABLE.len()];
        let mut call = vec![Bytes::from_static(spec.name.as_bytes())];
        call.extend(args.into_iter().map(Bytes::from));
        let _ = u.check(spec, &call);
        let _ = u.check(spec, &[]);
    }
}
