//! Tests of the check's decisions and texts, `ACL LOG`, `ACL GENPASS` and the ACL file,
//! each pinned from redis-server 7.0.15 unless a comment says otherwise.

use bytes::Bytes;
use dmc_resp::Reply;

use super::tests::{check, user};
use super::*;

fn key(k: &str) -> Result<(), Denied> {
    Err(Denied::Key(Bytes::copy_from_slice(k.as_bytes())))
}

fn channel(c: &str) -> Result<(), Denied> {
    Err(Denied::Channel(Bytes::copy_from_slice(c.as_bytes())))
}

fn command(c: &str) -> Result<(), Denied> {
    Err(Denied::Command(c.into()))
}

#[test]
fn a_reader_of_app_keys() {
    let u = user("on nopass ~app:* +@read");
    assert_eq!(check(&u, "get app:1"), Ok(()));
    assert_eq!(check(&u, "get other:1"), key("other:1"));
    assert_eq!(check(&u, "set app:1 v"), command("set"));
    assert_eq!(
        check(&u, "mget app:1 app:2 other:1 other:2"),
        key("other:1")
    );
}

/// Redis 7.0 checks each key for what its key spec does to it: INCR reads and writes,
/// SET writes (and reads with GET), DEL and a move's destination write, EXISTS and
/// TYPE do neither (any pattern will do).
#[test]
fn keys_need_what_their_key_spec_says() {
    let u = user("on nopass %W~w:* %R~r:* ~app:* &chan:* +@all");
    let cases: &[(&str, Result<(), Denied>)] = &[
        ("incr w:1", key("w:1")),
        ("set w:1 v", Ok(())),
        ("set w:1 v get", key("w:1")),
        ("set w:1 v GET", key("w:1")),
        ("exists w:1", Ok(())),
        ("type w:1", Ok(())),
        ("touch w:1", Ok(())),
        ("get w:1", key("w:1")),
        ("get r:1", Ok(())),
        ("del r:1", key("r:1")),
        ("del w:1", Ok(())),
        ("lmove r:1 w:1 left left", key("r:1")),
        ("rename w:1 w:2", key("w:1")),
        ("copy r:1 w:1", Ok(())),
        ("zunionstore w:d 2 r:1 r:2", Ok(())),
        ("get other", key("other")),
        ("mget app:1 other", key("other")),
        ("memory usage other", key("other")),
        ("object encoding other", key("other")),
        ("eval x 1 other", key("other")),
        ("sintercard 1 other", key("other")),
        ("ping", Ok(())),
        ("publish chan:1 x", Ok(())),
        ("publish other x", channel("other")),
        ("spublish other x", channel("other")),
        ("spublish chan:x x", Ok(())),
        ("subscribe chan:1 other", channel("other")),
        ("ssubscribe other", channel("other")),
        // A subscribed pattern must be one of the user's, literally.
        ("psubscribe chan:*", Ok(())),
        ("psubscribe chan:1*", channel("chan:1*")),
        ("unsubscribe other", Ok(())),
        ("punsubscribe other*", Ok(())),
    ];
    for (call, want) in cases {
        assert_eq!(&check(&u, call), want, "{call}");
    }
}

#[test]
fn subcommands_and_first_args() {
    let u = user("on >pw ~app:* +config|get +select|0 +get +@transaction");
    let cases: &[(&str, Result<(), Denied>)] = &[
        ("config get maxmemory", Ok(())),
        ("config set maxmemory 0", command("config|set")),
        ("CONFIG SET maxmemory 0", command("config|set")),
        ("select 0", Ok(())),
        ("select 1", command("select")),
        ("get app:1", Ok(())),
        ("set app:1 x", command("set")),
        ("multi", Ok(())),
        // Redis skips the command check of AUTH, HELLO, QUIT and RESET.
        ("auth s1 pw", Ok(())),
        ("hello", Ok(())),
        ("quit", Ok(())),
        ("reset", Ok(())),
        // Redis answers an unknown subcommand before its ACL check; DMC's container
        // answers it after, so the user is refused as for the container (DMC's).
        ("config nosuch", command("config")),
    ];
    for (call, want) in cases {
        assert_eq!(&check(&u, call), want, "{call}");
    }
    // A container allowed whole allows its subcommands, and one taken away.
    let u = user("+@all -config|set");
    assert_eq!(check(&u, "config get x"), Ok(()));
    assert_eq!(check(&u, "config set x y"), command("config|set"));
    let u = user("+client");
    assert_eq!(check(&u, "client id"), Ok(()));
    assert_eq!(check(&u, "client nosuch"), Ok(()));
}

#[test]
fn noperm_texts() {
    assert_eq!(
        Denied::Command("set".into()).to_string(),
        "NOPERM this user has no permissions to run the 'set' command"
    );
    assert_eq!(
        Denied::Command("config|set".into()).to_string(),
        "NOPERM this user has no permissions to run the 'config|set' command"
    );
    assert_eq!(
        Denied::Key(Bytes::from_static(b"k")).to_string(),
        "NOPERM this user has no permissions to access one of the keys used as arguments"
    );
    assert_eq!(
        Denied::Channel(Bytes::from_static(b"c")).to_string(),
        "NOPERM this user has no permissions to access one of the channels used as arguments"
    );
    // ACL DRYRUN's texts (acl.c).
    assert_eq!(
        Denied::Key(Bytes::from_static(b"k")).dryrun_text(),
        "This user has no permissions to access the 'k' key"
    );
}

fn entry(reason: Reason, object: &str, user: &str, now_ms: u64) -> LogEntry {
    LogEntry {
        count: 1,
        reason,
        context: Context::Toplevel,
        object: Bytes::copy_from_slice(object.as_bytes()),
        username: Bytes::copy_from_slice(user.as_bytes()),
        time_ms: now_ms,
        client_info: format!("id={now_ms}"),
    }
}

#[test]
fn acl_log_merges_repeats() {
    let mut log = AclLog::default();
    assert_eq!(log.max_len(), 128);
    log.add(entry(Reason::Key, "other", "k1", 1_000));
    log.add(entry(Reason::Key, "x", "k1", 1_500));
    log.add(entry(Reason::Key, "other", "k1", 2_000));
    let first = log.entries().next().expect("an entry");
    assert_eq!((first.count, &first.object[..]), (2, &b"other"[..]));
    assert_eq!(
        (first.time_ms, first.client_info.as_str()),
        (2_000, "id=2000")
    );
    assert_eq!(log.len(), 2);
    // Another reason, context or user is another entry; so is a repeat a minute later.
    log.add(entry(Reason::Channel, "other", "k1", 2_000));
    log.add(entry(Reason::Key, "other", "k2", 2_000));
    let mut multi = entry(Reason::Key, "other", "k1", 2_000);
    multi.context = Context::Multi;
    log.add(multi);
    log.add(entry(Reason::Key, "other", "k1", 62_001));
    assert_eq!(log.len(), 6);
    // Only the newest ten are looked at.
    for i in 0..10 {
        log.add(entry(Reason::Command, &format!("c{i}"), "k1", 62_001));
    }
    log.add(entry(Reason::Key, "other", "k1", 62_002));
    assert_eq!(log.len(), 17);
    log.set_max_len(3);
    assert_eq!(log.len(), 17, "cut at the next entry, as Redis");
    log.add(entry(Reason::Auth, "auth", "nosuch", 62_003));
    assert_eq!(log.len(), 3);
    assert_eq!(log.command(Some(b"RESET"), 0), Ok(Reply::ok()));
    assert!(log.is_empty());
}

#[test]
fn acl_log_replies() {
    let mut log = AclLog::default();
    let u = user("on nopass ~app:*");
    let denied = check(&u, "set app:1 v").expect_err("refused");
    log.add(LogEntry::denied(
        &denied,
        Context::Toplevel,
        Bytes::from_static(b"u"),
        "id=3 cmd=set user=u".into(),
        10_000,
    ));
    let bulk = |s: &'static str| Reply::bulk(s);
    let want = Reply::Map(vec![
        (bulk("count"), Reply::Int(1)),
        (bulk("reason"), bulk("command")),
        (bulk("context"), bulk("toplevel")),
        (bulk("object"), bulk("set")),
        (bulk("username"), bulk("u")),
        (bulk("age-seconds"), Reply::Double(2.512)),
        (bulk("client-info"), bulk("id=3 cmd=set user=u")),
    ]);
    assert_eq!(
        log.command(None, 12_512),
        Ok(Reply::Array(vec![want.clone()]))
    );
    assert_eq!(
        log.command(Some(b"1"), 12_512),
        Ok(Reply::Array(vec![want]))
    );
    assert_eq!(log.command(Some(b"-1"), 12_512), Ok(Reply::Array(vec![])));
    assert_eq!(log.command(Some(b"x"), 0), Err(AclError::NotInteger));
    assert_eq!(
        AclError::NotInteger.to_string(),
        "ERR value is not an integer or out of range"
    );
}

#[test]
fn genpass() {
    let hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let p = super::genpass(None).expect("default");
    assert!(p.len() == 64 && hex(&p), "{p}");
    assert_ne!(p, super::genpass(None).expect("default"));
    for (bits, chars) in [("1", 1), ("5", 2), ("8", 2), ("9", 3), ("4096", 1024)] {
        let p = super::genpass(Some(bits.as_bytes())).expect(bits);
        assert!(p.len() == chars && hex(&p), "{bits}: {p}");
    }
    for bits in ["0", "4097", "-3"] {
        assert_eq!(
            super::genpass(Some(bits.as_bytes()))
                .expect_err(bits)
                .to_string(),
            "ERR ACL GENPASS argument must be the number of bits for the output password, \
             a positive number up to 4096"
        );
    }
    assert_eq!(super::genpass(Some(b"x")), Err(AclError::NotInteger));
}

const FILE: &str = "/tmp/aclt/users.acl";
const WARNING: &str =
    "WARNING: ACL errors detected, no change to the previously active ACL rules was performed";

fn load(text: &str) -> Result<Vec<String>, String> {
    Users::from_acl_file(text.as_bytes(), FILE)
        .map(|u| {
            u.list()
                .iter()
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .collect()
        })
        .map_err(|e| e.to_string())
}

#[test]
fn acl_file_loads() {
    assert_eq!(
        load("user default on nopass ~* &* +@all\n\nuser a on >x ~k +get\n"),
        Ok(vec![
            "user a on #2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881 ~k \
             resetchannels -@all +get"
                .into(),
            "user default on nopass ~* &* +@all".into(),
        ])
    );
    // Without a default user, the usual one.
    assert_eq!(
        load("user d on\n"),
        Ok(vec![
            "user d on resetchannels -@all".into(),
            "user default on nopass ~* &* +@all".into()
        ])
    );
    assert_eq!(
        load("user default on nopass ~* &* +@all\nuser g on nopass +@all ~* &*\r\n"),
        Ok(vec![
            "user default on nopass ~* &* +@all".into(),
            "user g on nopass ~* &* +@all".into()
        ])
    );
    // A default user in the file starts from nothing, as any other.
    assert_eq!(
        load("user default on"),
        Ok(vec!["user default on resetchannels -@all".into()])
    );
}

#[test]
fn acl_file_errors_read_as_redis_7s() {
    let start = format!("{FILE}:1 should start with user keyword followed by the username. ");
    let hash = "The password hash must be exactly 64 characters and contain only lowercase \
                hexadecimal characters";
    let unknown = "Unknown command or category name in ACL";
    let cases: Vec<(&str, String)> = vec![
        ("foo bar\n", start.clone()),
        ("user\n", start.clone()),
        ("# comment\n", start.clone()),
        ("User e on\n", start),
        (
            "user a on\nuser a off\n",
            "WARNING: Duplicate user 'a' found on line 2. ".into(),
        ),
        (
            "user a +nosuch +alsono\n",
            format!(
                "{FILE}:1: Error in applying operation '+nosuch': {unknown}. \
                 {FILE}:1: Error in applying operation '+alsono': {unknown}. "
            ),
        ),
        (
            "user a ~x allkeys ~y foo\n",
            format!(
                "{FILE}:1: Adding a pattern after the * pattern (or the 'allkeys' flag) is not \
                 valid and does not have any effect. Try 'resetkeys' to start with an empty \
                 list of patterns. "
            ),
        ),
        ("user a #abc foo\n", format!("{FILE}:1: {hash}. ")),
        (
            "user a (~x +get\n",
            format!("{FILE}:1: Unmatched parenthesis in selector definition."),
        ),
        // Split on single spaces: empty rules do nothing, `b` is a rule.
        ("  user   b  on  \n", format!("{FILE}:1: Syntax error. ")),
        (
            "user a\tb on\n",
            format!("'{FILE}:1: username 'a\tb' contains invalid characters. "),
        ),
        ("user f \"on\"\n", format!("{FILE}:1: Syntax error. ")),
        (
            "user default on nopass ~* &* +@all\nuser h on +nosuch #abc foo\n",
            format!(
                "{FILE}:2: Error in applying operation '+nosuch': {unknown}. {FILE}:2: {hash}. "
            ),
        ),
        (
            "user default on nopass ~* &* +@all\nuser h on #abc +nosuch foo\n",
            format!(
                "{FILE}:2: {hash}. {FILE}:2: Error in applying operation '+nosuch': {unknown}. "
            ),
        ),
        ("user h on ~a b\n", format!("{FILE}:1: Syntax error. ")),
        ("user h on\t~x\n", format!("{FILE}:1: Syntax error. ")),
    ];
    for (text, want) in cases {
        assert_eq!(load(text), Err(format!("ERR {want}{WARNING}")), "{text:?}");
    }
}

#[test]
fn acl_file_round_trips() {
    let mut users = Users::new(Some(b"pw"));
    users
        .setuser(
            b"app",
            &super::tests::words("on >x %R~r:* ~app:* &c:* +@read -get +select|1"),
        )
        .expect("app");
    users.setuser(b"off", &["reset"]).expect("off");
    let text = users.to_acl_file();
    let again = Users::from_acl_file(&text, FILE).expect("loads");
    assert_eq!(again.list(), users.list());
    assert_eq!(again.to_acl_file(), text);
    assert!(text.ends_with(b"\n"));
}

#[test]
fn unrestricted_users() {
    assert!(Users::default().default_user().unrestricted());
    assert!(user("+@all ~* &*").unrestricted());
    assert!(!user("+@all ~*").unrestricted(), "channels limited");
    assert!(
        !user("+@all -get +get ~* &*").unrestricted(),
        "Redis's flag is gone"
    );
    let u = user("on nopass %R~r:* &c");
    assert!(u.key_allowed(b"r:1", false) && !u.key_allowed(b"r:1", true));
    assert!(u.channel_allowed(b"c", false) && !u.channel_allowed(b"d", false));
    let entry = LogEntry::auth(
        Bytes::from_static(b"AUTH"),
        Context::Multi,
        Bytes::from_static(b"k9"),
        String::new(),
        5,
    );
    assert_eq!(
        (entry.reason.name(), entry.context.name()),
        ("auth", "multi")
    );
}
