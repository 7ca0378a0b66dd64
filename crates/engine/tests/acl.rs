//! ACL users in the engine, with the replies redis-server 7.0 gives (taken from it):
//! ACL SETUSER/GETUSER/LIST/USERS/WHOAMI/DELUSER/DRYRUN/LOG, AUTH and HELLO AUTH with
//! users, the check before every command (top level, queued in MULTI, in a script),
//! a user's changed rules reaching its open connections, a deleted user's connection
//! closed, and CLIENT LIST / CLIENT KILL USER.

mod support;

use bytes::Bytes;
use dmc_engine::{Flow, Session};
use dmc_resp::Reply;
use support::{Backend, engine, run};

fn bulk(s: &str) -> Reply {
    Reply::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

fn err(s: &str) -> Reply {
    Reply::Error(s.to_string())
}

const NO_SET: &str = "NOPERM this user has no permissions to run the 'set' command";
const NO_KEY: &str =
    "NOPERM this user has no permissions to access one of the keys used as arguments";

/// The fields of `ACL LOG`'s newest entry: reason, context, object, username.
fn newest_log(reply: &Reply) -> (String, String, String, String) {
    let Reply::Array(entries) = reply else {
        panic!("ACL LOG answered {reply:?}");
    };
    let Some(Reply::Map(fields)) = entries.first() else {
        panic!("no ACL LOG entry: {reply:?}");
    };
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| *k == bulk(name))
            .map(|(_, v)| match v {
                Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                other => format!("{other:?}"),
            })
            .unwrap_or_default()
    };
    (
        field("reason"),
        field("context"),
        field("object"),
        field("username"),
    )
}

fn session(engine: &dmc_engine::Engine, n: u64) -> Session {
    engine.new_session(format!("127.0.0.1:{n}"), "127.0.0.1:6379".into(), -1)
}

#[tokio::test]
async fn a_read_only_user_of_app_keys_is_refused_writes_and_other_keys_and_the_log_shows_it() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut admin = session(&engine, 1);
    assert_eq!(
        run(
            &engine,
            &mut admin,
            &["ACL", "SETUSER", "app", "on", ">pw", "~app:*", "+@read"]
        )
        .await,
        Reply::ok()
    );
    assert_eq!(
        run(&engine, &mut admin, &["ACL", "USERS"]).await,
        Reply::Array(vec![bulk("app"), bulk("default")])
    );
    assert_eq!(
        run(
            &engine,
            &mut admin,
            &["ACL", "DRYRUN", "app", "set", "app:1", "x"]
        )
        .await,
        bulk("This user has no permissions to run the 'set' command")
    );
    assert_eq!(
        run(
            &engine,
            &mut admin,
            &["ACL", "DRYRUN", "app", "get", "other"]
        )
        .await,
        bulk("This user has no permissions to access the 'other' key")
    );
    assert_eq!(
        run(
            &engine,
            &mut admin,
            &["ACL", "DRYRUN", "nouser", "get", "x"]
        )
        .await,
        err("ERR User 'nouser' not found")
    );

    let mut app = session(&engine, 2);
    assert_eq!(
        run(&engine, &mut app, &["AUTH", "app", "nope"]).await,
        err("WRONGPASS invalid username-password pair or user is disabled.")
    );
    assert_eq!(
        run(&engine, &mut app, &["AUTH", "app", "pw"]).await,
        Reply::ok()
    );
    assert_eq!(
        run(&engine, &mut app, &["ACL", "WHOAMI"]).await,
        err("NOPERM this user has no permissions to run the 'acl|whoami' command")
    );
    assert_eq!(run(&engine, &mut app, &["GET", "app:1"]).await, Reply::Null);
    assert_eq!(
        run(&engine, &mut app, &["SET", "app:1", "x"]).await,
        err(NO_SET)
    );
    assert_eq!(
        run(&engine, &mut app, &["GET", "other:1"]).await,
        err(NO_KEY)
    );
    assert_eq!(
        newest_log(&run(&engine, &mut admin, &["ACL", "LOG", "1"]).await),
        (
            "key".into(),
            "toplevel".into(),
            "other:1".into(),
            "app".into()
        )
    );
    let Reply::Verbatim(list) = run(&engine, &mut admin, &["CLIENT", "LIST"]).await else {
        panic!("CLIENT LIST");
    };
    assert!(
        String::from_utf8_lossy(&list).contains(" user=app "),
        "{list:?}"
    );

    // Queued in MULTI: refused at once, and EXEC aborts (as Redis 7.0).
    run(
        &engine,
        &mut admin,
        &["ACL", "SETUSER", "app", "+multi", "+exec", "+eval"],
    )
    .await;
    assert_eq!(run(&engine, &mut app, &["MULTI"]).await, Reply::ok());
    assert_eq!(
        run(&engine, &mut app, &["SET", "app:1", "x"]).await,
        err(NO_SET)
    );
    assert_eq!(
        run(&engine, &mut app, &["GET", "app:1"]).await,
        Reply::Simple("QUEUED")
    );
    assert_eq!(
        run(&engine, &mut app, &["EXEC"]).await,
        err("EXECABORT Transaction discarded because of previous errors.")
    );
    // In a script: Redis's script texts, logged as `lua`.
    let Reply::Error(e) = run(
        &engine,
        &mut app,
        &["EVAL", "return redis.call('set',KEYS[1],'x')", "1", "app:1"],
    )
    .await
    else {
        panic!("a refused write in a script");
    };
    assert!(
        e.starts_with(
            "ERR The user executing the script can't run this command or subcommand script: "
        ),
        "{e}"
    );
    let Reply::Error(e) = run(
        &engine,
        &mut app,
        &["EVAL", "return redis.call('get','other')", "0"],
    )
    .await
    else {
        panic!("a refused key in a script");
    };
    assert!(
        e.starts_with("ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: "),
        "{e}"
    );
    assert_eq!(
        newest_log(&run(&engine, &mut admin, &["ACL", "LOG", "1"]).await),
        ("key".into(), "lua".into(), "other".into(), "app".into())
    );

    // A change of the user reaches its open connection.
    run(&engine, &mut admin, &["ACL", "SETUSER", "app", "+set"]).await;
    assert_eq!(
        run(&engine, &mut app, &["SET", "app:1", "x"]).await,
        Reply::ok()
    );
    // Deleted, its connection is closed.
    assert_eq!(
        run(&engine, &mut admin, &["ACL", "DELUSER", "app"]).await,
        Reply::Int(1)
    );
    let (_, flow) = engine
        .execute(&mut app, support::cmd(&["GET", "app:1"]))
        .await;
    assert_eq!(flow, Flow::Close);
}

#[tokio::test]
async fn acl_subcommands_answer_as_redis_does() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut s = session(&engine, 1);
    assert_eq!(
        run(&engine, &mut s, &["ACL", "WHOAMI"]).await,
        bulk("default")
    );
    assert_eq!(
        run(&engine, &mut s, &["ACL", "WHOAMI", "extra"]).await,
        err("ERR wrong number of arguments for 'acl|whoami' command")
    );
    assert_eq!(
        run(&engine, &mut s, &["ACL", "GETUSER", "nobody"]).await,
        Reply::Null
    );
    assert_eq!(
        run(&engine, &mut s, &["ACL", "SETUSER", "bad name"]).await,
        err("ERR Usernames can't contain spaces or null characters")
    );
    assert_eq!(
        run(&engine, &mut s, &["ACL", "DELUSER", "default"]).await,
        err("ERR The 'default' user cannot be removed")
    );
    assert_eq!(
        run(&engine, &mut s, &["CLIENT", "KILL", "USER", "nosuch"]).await,
        err("ERR No such user 'nosuch'")
    );
    assert_eq!(
        run(&engine, &mut s, &["ACL", "LIST"]).await,
        Reply::Array(vec![bulk("user default on nopass ~* &* +@all")])
    );
    assert_eq!(
        run(&engine, &mut s, &["ACL", "NOSUCH"]).await,
        err("ERR unknown subcommand 'NOSUCH'. Try ACL HELP.")
    );
    assert_eq!(
        run(&engine, &mut s, &["ACL", "SAVE"]).await,
        err(
            "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration."
        )
    );
    // HELLO AUTH with a user, and its failure in the log under the command's name.
    run(
        &engine,
        &mut s,
        &["ACL", "SETUSER", "u", "on", ">p", "~*", "+@all"],
    )
    .await;
    let mut other = session(&engine, 2);
    assert_eq!(
        run(&engine, &mut other, &["HELLO", "3", "AUTH", "u", "nope"]).await,
        err("WRONGPASS invalid username-password pair or user is disabled.")
    );
    assert_eq!(
        newest_log(&run(&engine, &mut s, &["ACL", "LOG", "1"]).await),
        ("auth".into(), "toplevel".into(), "HELLO".into(), "u".into())
    );
    assert!(matches!(
        run(&engine, &mut other, &["HELLO", "3", "AUTH", "u", "p"]).await,
        Reply::Map(_)
    ));
    assert_eq!(
        run(&engine, &mut other, &["ACL", "WHOAMI"]).await,
        bulk("u")
    );
    assert_eq!(
        run(&engine, &mut s, &["ACL", "LOG", "RESET"]).await,
        Reply::ok()
    );
    assert_eq!(
        run(&engine, &mut s, &["ACL", "LOG"]).await,
        Reply::Array(vec![])
    );
    // CLIENT KILL USER closes that user's connections.
    assert_eq!(
        run(&engine, &mut s, &["CLIENT", "KILL", "USER", "u"]).await,
        Reply::Int(1)
    );
    assert!(other.client.is_killed());
}

#[tokio::test]
async fn the_aclfile_is_saved_and_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.acl");
    let (h, _) = engine(Backend::Local).await;
    let engine = dmc_engine::Engine::new(
        h.dht.clone(),
        std::sync::Arc::new(dmc_dht::SystemClock),
        dmc_engine::EngineConfig {
            aclfile: Some(path.clone()),
            ..Default::default()
        },
    );
    let mut s = session(&engine, 1);
    run(
        &engine,
        &mut s,
        &["ACL", "SETUSER", "app", "on", "nopass", "~app:*", "+get"],
    )
    .await;
    assert_eq!(run(&engine, &mut s, &["ACL", "SAVE"]).await, Reply::ok());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.contains("user app on nopass ~app:* resetchannels -@all +get"),
        "{text}"
    );
    run(&engine, &mut s, &["ACL", "DELUSER", "app"]).await;
    assert_eq!(run(&engine, &mut s, &["ACL", "LOAD"]).await, Reply::ok());
    assert_eq!(
        run(&engine, &mut s, &["ACL", "USERS"]).await,
        Reply::Array(vec![bulk("app"), bulk("default")])
    );
}

/// A script still running when its user is deleted went on with the rules from before
/// (it failed open); its next call now fails and ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_script_whose_user_is_deleted_fails_closed() {
    let (_h, engine) = engine(Backend::Local).await;
    let mut admin = session(&engine, 1);
    for setup in [
        &["ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all"][..],
        // Commands on a running script's keys answer BUSY at once: how this test
        // sees that the script runs.
        &["CONFIG", "SET", "busy-reply-threshold", "0"][..],
    ] {
        assert_eq!(run(&engine, &mut admin, setup).await, Reply::ok());
    }
    let script = {
        let engine = engine.clone();
        tokio::spawn(async move {
            let mut app = session(&engine, 2);
            assert_eq!(
                run(&engine, &mut app, &["AUTH", "app", "pw"]).await,
                Reply::ok()
            );
            // Caught with pcall, the first refusal would let a second call through
            // with the rules from before: both must be refused.
            let body = "while true do \
                 local r = redis.pcall('GET', KEYS[1]) \
                 if type(r) == 'table' and r.err then \
                   local again = redis.pcall('GET', KEYS[1]) \
                   return {r.err, type(again) == 'table' and again.err or 'allowed'} \
                 end \
               end";
            run(&engine, &mut app, &["EVAL", body, "1", "k"]).await
        })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match run(&engine, &mut admin, &["GET", "k"]).await {
            Reply::Error(e) if e.starts_with("BUSY") => break,
            other => assert!(
                std::time::Instant::now() < deadline,
                "the script never ran: {other:?}"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(
        run(&engine, &mut admin, &["ACL", "DELUSER", "app"]).await,
        Reply::Int(1)
    );
    let reply = tokio::time::timeout(std::time::Duration::from_secs(30), script)
        .await
        .expect("the script ended")
        .expect("the script's task");
    assert_eq!(
        reply,
        Reply::Array(vec![
            Reply::bulk("ERR The user executing the script was deleted"),
            Reply::bulk("ERR The user executing the script can't run this command or subcommand"),
        ])
    );
}
