//! Table-driven tests of the ACL model. Every text and rendering pinned here was read
//! from redis-server 7.0.15 (`ACL SETUSER`, `ACL LIST`, `ACL GETUSER`, `ACL CAT`,
//! `ACL LOG`, `ACL LOAD`, the `-NOPERM` replies) unless a comment says otherwise.

use bytes::Bytes;
use dmc_resp::Reply;

use super::categories::COMMANDS;
use super::*;
use crate::table::{TABLE, lookup};

pub(super) fn words(line: &str) -> Vec<Bytes> {
    line.split(' ')
        .filter(|w| !w.is_empty())
        .map(|w| Bytes::copy_from_slice(w.as_bytes()))
        .collect()
}

/// A user `u` made by `ACL SETUSER u <rules>`.
pub(super) fn user(rules: &str) -> Arc<User> {
    Users::default().setuser(b"u", &words(rules)).expect(rules)
}

/// The user's check of the call `line` (arity-checked as dispatch would).
pub(super) fn check(user: &User, line: &str) -> Result<(), Denied> {
    let a = words(line);
    let spec = lookup(&a[0]).expect(line);
    assert!(spec.arity_ok(a.len()), "{line}: arity");
    user.check(spec, &a)
}

fn line(user: &User) -> String {
    String::from_utf8(user.acl_list_line().to_vec()).expect("utf-8")
}

#[test]
fn every_table_row_has_categories_and_key_access() {
    for spec in TABLE.iter() {
        let entry = COMMANDS
            .iter()
            .find(|e| e.name == spec.name)
            .unwrap_or_else(|| panic!("{} has no categories", spec.name));
        assert_ne!(entry.categories, 0, "{}", spec.name);
        // Every command is @fast or @slow, never both.
        let fast = entry.categories & Category::Fast.bit() != 0;
        let slow = entry.categories & Category::Slow.bit() != 0;
        assert!(fast != slow, "{}", spec.name);
        if spec.first_key > 0 || spec.numkeys > 0 {
            // A container's keys are its subcommands' (OBJECT ENCODING key).
            let prefix = format!("{}|", spec.name);
            let has_access = !entry.keys.is_empty()
                || COMMANDS
                    .iter()
                    .any(|e| e.name.starts_with(&prefix) && !e.keys.is_empty());
            assert!(has_access, "{} has keys but no key access", spec.name);
        }
        assert_eq!(
            categories::NO_AUTH.contains(&spec.name),
            spec.has_flag("no-auth"),
            "{}",
            spec.name
        );
    }
    let mut names: Vec<_> = COMMANDS.iter().map(|e| e.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), COMMANDS.len(), "a name twice");
}

#[test]
fn categories_are_redis_7s() {
    assert_eq!(
        category_names().join(" "),
        "keyspace read write set sortedset list hash string bitmap hyperloglog geo stream \
         pubsub admin fast slow blocking dangerous connection transaction scripting"
    );
    assert_eq!(Category::from_name(b"SortedSet"), Some(Category::SortedSet));
    let cats = |n| {
        categories_of(n)
            .expect(n)
            .iter()
            .map(|c| c.name())
            .collect::<Vec<_>>()
            .join(" ")
    };
    // COMMAND INFO's categories in redis-server 7.0.15.
    assert_eq!(cats("get"), "read string fast");
    assert_eq!(cats("set"), "write string slow");
    assert_eq!(cats("blpop"), "write list slow blocking");
    assert_eq!(cats("config|set"), "admin slow dangerous");
    assert_eq!(cats("config"), "slow");
    assert_eq!(cats("eval_ro"), "slow scripting");
    assert_eq!(cats("flushall"), "keyspace write slow dangerous");
    assert!(categories_of("nosuchcommand").is_none(), "not a command");
    assert_eq!(cats("xadd"), "write stream fast");
    assert_eq!(cats("xgroup|create"), "write stream slow");
    assert_eq!(cats("bitop"), "write bitmap slow");
    assert_eq!(cats("geosearchstore"), "write geo slow");
    assert_eq!(cats("sort"), "write set sortedset list slow dangerous");
}

fn sorted(mut v: Vec<&str>) -> Vec<&str> {
    v.sort_unstable();
    v
}

#[test]
fn acl_cat_lists_dmc_commands_in_a_category() {
    // redis-server's own lists, less the commands DMC does not have.
    let cat = |c: &str| sorted(commands_in_category(c.as_bytes()).expect(c));
    assert_eq!(
        cat("transaction"),
        sorted(vec!["unwatch", "discard", "exec", "watch", "multi"])
    );
    assert_eq!(
        cat("Scripting"),
        sorted(vec![
            "eval",
            "eval_ro",
            "evalsha",
            "evalsha_ro",
            "fcall",
            "fcall_ro",
            "function|delete",
            "function|dump",
            "function|flush",
            "function|help",
            "function|kill",
            "function|list",
            "function|load",
            "function|restore",
            "function|stats",
            "script|debug",
            "script|exists",
            "script|flush",
            "script|help",
            "script|kill",
            "script|load",
        ])
    );
    let connection = cat("connection");
    for name in [
        "asking",
        "auth",
        "client|kill",
        "client|no-evict",
        "command",
        "command|docs",
        "echo",
        "hello",
        "ping",
        "quit",
        "readonly",
        "readwrite",
        "reset",
        "select",
        "wait",
        // Redis 7.2's, which DMC answers.
        "client|setinfo",
    ] {
        assert!(connection.contains(&name), "{name}");
    }
    assert!(
        !connection.contains(&"client"),
        "the container is @slow only"
    );
    assert_eq!(
        commands_in_category(b"nosuch"),
        Err(AclError::UnknownCategory("nosuch".into()))
    );
    assert_eq!(
        AclError::UnknownCategory("nosuch".into()).to_string(),
        "ERR Unknown category 'nosuch'"
    );
}

#[test]
fn the_default_user() {
    let users = Users::default();
    assert_eq!(
        line(&users.default_user()),
        "user default on nopass ~* &* +@all"
    );
    let users = Users::new(Some(b"foo"));
    assert_eq!(
        line(&users.default_user()),
        "user default on #2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae \
         ~* &* +@all"
    );
    assert!(users.authenticate(b"default", b"foo").is_some());
    assert!(users.authenticate(b"default", b"bar").is_none());
    assert!(users.authenticate(b"nosuch", b"foo").is_none());
    let bulk = |s: &'static str| Reply::bulk(s);
    assert_eq!(
        Users::default().default_user().getuser_reply(),
        Reply::Map(vec![
            (bulk("flags"), Reply::Set(vec![bulk("on"), bulk("nopass")])),
            (bulk("passwords"), Reply::Array(vec![])),
            (bulk("commands"), bulk("+@all")),
            (bulk("keys"), bulk("~*")),
            (bulk("channels"), bulk("&*")),
            (bulk("selectors"), Reply::Array(vec![])),
        ])
    );
}

/// `ACL SETUSER u <rules>`, then `ACL LIST`'s line, as redis-server 7.0.15 gave them.
#[test]
fn setuser_then_list() {
    let cases: &[(&str, &str)] = &[
        ("", "off resetchannels -@all"),
        ("reset", "off sanitize-payload resetchannels -@all"),
        (
            "on nopass ~app:* +@read",
            "on nopass ~app:* resetchannels -@all +@read",
        ),
        (
            "%R %w~x %Wr~y ~z %R~z &c1 &c1 &c2 ~z",
            "off %R~ %W~x ~y ~z resetchannels &c1 &c2 -@all",
        ),
        ("%R %RW ~b ~c &", "off ~ ~b ~c resetchannels & -@all"),
        (
            "on >",
            "on #e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 resetchannels -@all",
        ),
        ("+@all -flushall", "off resetchannels +@all -flushall"),
        ("+config|get", "off resetchannels -@all +config|get"),
        (
            "+select|0 +select|1",
            "off resetchannels -@all +select|0 +select|1",
        ),
        ("+@all -config|set", "off resetchannels +@all -config|set"),
        ("+@admin", "off resetchannels -@all +@admin"),
        ("+client", "off resetchannels -@all +client"),
        ("+@all -@slow", "off resetchannels +@all -@slow"),
        ("+@all -@dangerous", "off resetchannels +@all -@dangerous"),
        ("+@connection", "off resetchannels -@all +@connection"),
        (
            "+@all -@admin +config|get",
            "off resetchannels +@all -@admin +config|get",
        ),
        ("+@hash +hset -hset", "off resetchannels -@all +@hash -hset"),
        ("+@pubsub", "off resetchannels -@all +@pubsub"),
        ("+@transaction", "off resetchannels -@all +@transaction"),
        ("+@scripting", "off resetchannels -@all +@scripting"),
        ("+@keyspace", "off resetchannels -@all +@keyspace"),
        ("+@blocking", "off resetchannels -@all +@blocking"),
        (
            "on >pw ~app:* +config|get +select|0 +get +@transaction",
            "on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 ~app:* \
             resetchannels -@all +@transaction +select|0 +config|get +get",
        ),
        ("allkeys allchannels allcommands", "off ~* &* +@all"),
        (
            "~* &* +@all nocommands resetkeys resetchannels",
            "off resetchannels -@all",
        ),
        (
            "nopass >x",
            "off #2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881 resetchannels -@all",
        ),
        (
            "skip-sanitize-payload",
            "off skip-sanitize-payload resetchannels -@all",
        ),
        ("clearselectors", "off resetchannels -@all"),
        // Redis 7.0 lists single commands in its dict's order (`+set +get`); DMC in
        // its table's.
        ("+get +set", "off resetchannels -@all +get +set"),
    ];
    for (rules, want) in cases {
        assert_eq!(line(&user(rules)), format!("user u {want}"), "{rules}");
    }
}

#[test]
fn getuser_of_a_user() {
    let u = user("%W~w:* %R~r:* ~app:* &chan:* &other +@all >p1 >p2 >p1");
    let bulk = |s: &str| Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()));
    assert_eq!(
        u.getuser_reply(),
        Reply::Map(vec![
            (bulk("flags"), Reply::Set(vec![bulk("off")])),
            (
                bulk("passwords"),
                Reply::Array(vec![
                    bulk("f64551fcd6f07823cb87971cfb91446425da18286b3ab1ef935e0cbd7a69f68a"),
                    bulk("3946ca64ff78d93ca61090a437cbb6b3d2ca0d488f5f9ccf3059608368b27693"),
                ])
            ),
            (bulk("commands"), bulk("+@all")),
            (bulk("keys"), bulk("%W~w:* %R~r:* ~app:*")),
            (bulk("channels"), bulk("&chan:* &other")),
            (bulk("selectors"), Reply::Array(vec![])),
        ])
    );
}

#[test]
fn rule_errors_read_as_redis_7s() {
    let cases: &[(&str, &str)] = &[
        ("foo", "Syntax error"),
        ("+nosuch", "Unknown command or category name in ACL"),
        ("+@nosuch", "Unknown command or category name in ACL"),
        ("+", "Unknown command or category name in ACL"),
        ("-", "Unknown command or category name in ACL"),
        ("+@", "Unknown command or category name in ACL"),
        ("+get|", "Syntax error"),
        ("+config|", "Syntax error"),
        ("+config|nosuch", "Unknown command or category name in ACL"),
        (
            "+config|get|x",
            "Allowing first-arg of a subcommand is not supported",
        ),
        ("-config|get|x", "Unknown command or category name in ACL"),
        ("-get|x", "Unknown command or category name in ACL"),
        ("+get|x|y", "Unknown command or category name in ACL"),
        (
            "#abc",
            "The password hash must be exactly 64 characters and contain only lowercase \
             hexadecimal characters",
        ),
        (
            "!abc",
            "The password hash must be exactly 64 characters and contain only lowercase \
             hexadecimal characters",
        ),
        (
            "<nopass",
            "The password you are trying to remove from the user does not exist",
        ),
        ("%X~a", "Syntax error"),
        ("%~a", "Syntax error"),
        ("%~", "Syntax error"),
        ("%", "Syntax error"),
        ("%RR~a", "Syntax error"),
    ];
    let mut users = Users::default();
    for (rule, reason) in cases {
        let err = users.setuser(b"t", &[rule.as_bytes()]).expect_err(rule);
        assert_eq!(
            err.to_string(),
            format!("ERR Error in ACL SETUSER modifier '{rule}': {reason}"),
        );
    }
    // Patterns with spaces (or, by acl.c, NUL), passed as one argument.
    for rule in ["~a b", "&a b", "~a\0b"] {
        let err = users.setuser(b"t", &[rule]).expect_err(rule);
        assert!(err.to_string().ends_with("': Syntax error"), "{rule}");
    }
    let err = |rules: &str| {
        users
            .clone()
            .setuser(b"t", &words(rules))
            .expect_err(rules)
            .to_string()
    };
    assert_eq!(
        err("allkeys ~a"),
        "ERR Error in ACL SETUSER modifier '~a': Adding a pattern after the * pattern (or the \
         'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start \
         with an empty list of patterns"
    );
    assert_eq!(
        err("allchannels &a"),
        "ERR Error in ACL SETUSER modifier '&a': Adding a pattern after the * pattern (or the \
         'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to \
         start with an empty list of channels"
    );
    assert_eq!(
        err("(~x"),
        "ERR Unmatched parenthesis in acl selector starting at '(~x'."
    );
    assert_eq!(
        err("("),
        "ERR Unmatched parenthesis in acl selector starting at '('."
    );
    assert_eq!(
        err("~x (+get ~y"),
        "ERR Unmatched parenthesis in acl selector starting at '(+get'."
    );
    // Selectors are not built: refused in Redis's modifier error (DMC's own reason).
    assert_eq!(
        err("on (~x +get)"),
        "ERR Error in ACL SETUSER modifier '(~x +get)': Selectors are not supported"
    );
    assert_eq!(
        err("on (~x +get ~y)"),
        "ERR Error in ACL SETUSER modifier '(~x +get ~y)': Selectors are not supported"
    );
    assert_eq!(
        users
            .setuser(b"a b", &["on"])
            .expect_err("space")
            .to_string(),
        "ERR Usernames can't contain spaces or null characters"
    );
}

#[test]
fn a_failed_setuser_changes_nothing() {
    let mut users = Users::default();
    users.setuser(b"u", &["on", "+get"]).expect("ok");
    let before = users.get(b"u").expect("u");
    assert!(users.setuser(b"u", &["off", "-get", "+nosuch"]).is_err());
    assert_eq!(users.get(b"u").expect("u"), before);
    assert!(users.setuser(b"new", &["on", "foo"]).is_err());
    assert!(users.get(b"new").is_none(), "not created");
}

#[test]
fn users_registry() {
    let mut users = Users::default();
    for n in ["c2", "c10", "b"] {
        users.setuser(n.as_bytes(), &["on"]).expect(n);
    }
    assert_eq!(users.names(), words("b c10 c2 default"), "bytewise order");
    assert_eq!(
        users.list()[0],
        Bytes::from_static(b"user b on resetchannels -@all")
    );
    assert_eq!(
        users
            .deluser(&["b", "nosuch", "default"])
            .expect_err("default"),
        AclError::DeleteDefault
    );
    assert_eq!(
        AclError::DeleteDefault.to_string(),
        "ERR The 'default' user cannot be removed"
    );
    assert_eq!(users.names().len(), 4, "nothing deleted");
    let gone = users.deluser(&["b", "nosuch", "c2"]).expect("deleted");
    assert_eq!(gone.len(), 2);
    assert_eq!(users.names(), words("c10 default"));
    // Users' passwords: on and matching, or nopass; off users never authenticate.
    users.setuser(b"p", &[">secret", "on"]).expect("p");
    assert!(users.authenticate(b"p", b"secret").is_some());
    assert!(users.authenticate(b"p", b"wrong").is_none());
    users.setuser(b"p", &["off"]).expect("p");
    assert!(users.authenticate(b"p", b"secret").is_none());
    users.setuser(b"n", &["on", "nopass"]).expect("n");
    assert!(users.authenticate(b"n", b"anything").is_some());
    users.set_requirepass(Some(b"x"));
    assert!(users.authenticate(b"default", b"x").is_some());
    users.set_requirepass(None);
    assert!(users.default_user().nopass());
}
