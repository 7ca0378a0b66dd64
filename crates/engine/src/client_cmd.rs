//! CLIENT and its subcommands: ID, names and library info, INFO and LIST, KILL,
//! UNBLOCK, PAUSE/UNPAUSE, NO-EVICT, REPLY, and client-side caching (TRACKING, CACHING,
//! GETREDIR, TRACKINGINFO; `tracking.rs` keeps the trackers).

use bytes::Bytes;
use dmc_resp::Reply;

use crate::clients::KillFilter;
use crate::upper;
use crate::{Engine, NOT_INTEGER, SYNTAX, Session, parse_i64};

/// Redis's rule for client names: printable ASCII without spaces.
pub(crate) fn check_name(name: &[u8]) -> Result<(), Reply> {
    if name.iter().any(|b| *b <= b' ' || *b > b'~') {
        return Err(Reply::err(
            "ERR Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    Ok(())
}

fn on_off(arg: &[u8]) -> Option<bool> {
    match upper(arg).as_str() {
        "ON" => Some(true),
        "OFF" => Some(false),
        _ => None,
    }
}

pub(crate) fn client(engine: &Engine, s: &mut Session, args: &[Bytes]) -> Reply {
    let sub = upper(&args[1]);
    match (sub.as_str(), args.len()) {
        ("ID", 2) => Reply::Int(s.id as i64),
        ("GETNAME", 2) => s.client.name().map(Reply::Bulk).unwrap_or(Reply::Null),
        ("SETNAME", 3) => {
            if let Err(r) = check_name(&args[2]) {
                return r;
            }
            s.client
                .set_name((!args[2].is_empty()).then(|| args[2].clone()));
            Reply::ok()
        }
        ("SETINFO", 4) => {
            let value = String::from_utf8_lossy(&args[3]).into_owned();
            if value.contains(|c: char| c <= ' ' || c > '~') {
                return Reply::Error(format!(
                    "ERR {} cannot contain spaces, newlines or special characters.",
                    upper(&args[2])
                ));
            }
            match upper(&args[2]).as_str() {
                "LIB-NAME" => s.client.set_lib(Some(value), None),
                "LIB-VER" => s.client.set_lib(None, Some(value)),
                other => return Reply::Error(format!("ERR Unrecognized option '{other}'")),
            }
            Reply::ok()
        }
        ("INFO", 2) => Reply::Verbatim(Bytes::from(
            s.client.line(&engine.clients, engine.pubsub.counts(s.id)),
        )),
        ("LIST", _) => client_list(engine, &args[2..]),
        ("KILL", 3) => {
            // The old form: CLIENT KILL ip:port.
            let addr = String::from_utf8_lossy(&args[2]);
            match engine.clients.all().into_iter().find(|c| c.addr == addr) {
                Some(c) => {
                    c.kill();
                    Reply::ok()
                }
                None => Reply::err("ERR No such client"),
            }
        }
        ("KILL", _) => match kill_filter(engine, &args[2..]) {
            Ok(filter) => {
                let mut n = 0;
                for c in engine.clients.all() {
                    if filter.matches(&c, s.id) {
                        c.kill();
                        n += 1;
                    }
                }
                Reply::Int(n)
            }
            Err(r) => r,
        },
        ("UNBLOCK", 3 | 4) => {
            let how = match args.get(3).map(|a| upper(a)).as_deref() {
                None | Some("TIMEOUT") => crate::clients::Unblock::Timeout,
                Some("ERROR") => crate::clients::Unblock::Error,
                Some(_) => {
                    return Reply::err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR");
                }
            };
            let Some(id) = parse_i64(&args[2]) else {
                return Reply::err(crate::NOT_INTEGER);
            };
            let found = engine.clients.all().into_iter().find(|c| c.id as i64 == id);
            Reply::Int(found.is_some_and(|c| c.unblock(how)) as i64)
        }
        ("PAUSE", 3 | 4) => {
            let Some(ms) = crate::parse_i64(&args[2]) else {
                return Reply::err("ERR timeout is not an integer or out of range");
            };
            if ms < 0 {
                return Reply::err("ERR timeout is negative");
            }
            let all = match args.get(3).map(|m| upper(m)).as_deref() {
                None | Some("ALL") => true,
                Some("WRITE") => false,
                Some(_) => return Reply::err("ERR CLIENT PAUSE mode must be WRITE or ALL"),
            };
            engine.pause.pause(ms as u64, all);
            Reply::ok()
        }
        ("TRACKING", n) if n >= 3 => engine.client_tracking(s, args),
        ("CACHING", 3) => engine.client_caching(s, &args[2]),
        ("GETREDIR", 2) => Reply::Int(s.tracking.as_ref().map_or(-1, |m| m.redirect as i64)),
        ("TRACKINGINFO", 2) => engine.client_trackinginfo(s),
        ("UNPAUSE", 2) => {
            engine.pause.unpause();
            Reply::ok()
        }
        ("NO-EVICT", 3) => match on_off(&args[2]) {
            Some(on) => {
                s.client.set_no_evict(on);
                Reply::ok()
            }
            None => Reply::err(SYNTAX),
        },
        ("REPLY", 3) => match upper(&args[2]).as_str() {
            "ON" => {
                s.reply_off = false;
                Reply::ok()
            }
            "OFF" => {
                s.reply_off = true;
                Reply::ok()
            }
            "SKIP" => {
                // This command's reply and the next one's.
                s.skip_replies = 2;
                Reply::ok()
            }
            _ => Reply::err(SYNTAX),
        },
        ("HELP", 2) => crate::subcommands::help(&[
            "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "INFO",
            "    Return information about the current client connection.",
            "KILL <ip:port>",
            "    Kill connection made from <ip:port>.",
            "KILL <option> <value> [<option> <value> [...]]",
            "    Kill connections. Options are: ID <client-id>, ADDR <ip:port>,",
            "    LADDR <ip:port>, USER <username>, SKIPME (YES|NO), MAXAGE <secs>,",
            "    TYPE (NORMAL|MASTER|REPLICA|PUBSUB).",
            "LIST [options ...]",
            "    Return information about client connections. Options: TYPE <type>,",
            "    ID <client-id> [<client-id> ...].",
            "NO-EVICT (ON|OFF)",
            "    Protect the current client connection from eviction.",
            "REPLY (ON|OFF|SKIP)",
            "    Control the replies sent to the current connection.",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
            "SETINFO <option> <value>",
            "    Set client meta attr. Options are: LIB-NAME, LIB-VER.",
            "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
            "         [OPTIN] [OPTOUT] [NOLOOP]",
            "    Control server assisted client side caching.",
            "TRACKINGINFO",
            "    Report tracking status for the current connection.",
            "CACHING (YES|NO)",
            "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
            "GETREDIR",
            "    Return the client ID we are redirecting to when tracking is enabled.",
            "HELP",
            "    Print this help.",
        ]),
        _ => crate::subcommands::refused(
            "CLIENT",
            &args[1],
            &[
                "ID",
                "SETNAME",
                "GETNAME",
                "SETINFO",
                "INFO",
                "LIST",
                "KILL",
                "NO-EVICT",
                "REPLY",
                "PAUSE",
                "UNPAUSE",
                "UNBLOCK",
                "TRACKING",
                "CACHING",
                "GETREDIR",
                "TRACKINGINFO",
                "HELP",
            ],
        ),
    }
}

/// `CLIENT LIST [TYPE type] [ID id [id ...]]`.
fn client_list(engine: &Engine, opts: &[Bytes]) -> Reply {
    let mut ids: Option<Vec<u64>> = None;
    let mut normal_only = true;
    match opts.first().map(|o| upper(o)).as_deref() {
        None => {}
        Some("TYPE") if opts.len() == 2 => match upper(&opts[1]).as_str() {
            "NORMAL" => {}
            "MASTER" | "REPLICA" | "SLAVE" | "PUBSUB" => normal_only = false,
            other => return Reply::Error(format!("ERR Unknown client type '{other}'")),
        },
        Some("ID") if opts.len() >= 2 => {
            let mut v = Vec::new();
            for o in &opts[1..] {
                match parse_i64(o) {
                    Some(id) if id > 0 => v.push(id as u64),
                    _ => return Reply::err("ERR Invalid client ID"),
                }
            }
            ids = Some(v);
        }
        _ => return Reply::err(SYNTAX),
    }
    let mut out = String::new();
    if normal_only {
        for c in engine.clients.all() {
            if ids.as_ref().is_none_or(|ids| ids.contains(&c.id)) {
                out.push_str(&c.line(&engine.clients, engine.pubsub.counts(c.id)));
            }
        }
    }
    Reply::Verbatim(Bytes::from(out))
}

/// The filters of `CLIENT KILL <option> <value> ...`.
fn kill_filter(engine: &Engine, opts: &[Bytes]) -> Result<KillFilter, Reply> {
    if !opts.len().is_multiple_of(2) {
        return Err(Reply::err(SYNTAX));
    }
    let mut f = KillFilter {
        skip_me: true,
        ..KillFilter::default()
    };
    for pair in opts.chunks(2) {
        let value = String::from_utf8_lossy(&pair[1]).into_owned();
        match upper(&pair[0]).as_str() {
            "ID" => match parse_i64(&pair[1]) {
                Some(id) if id > 0 => f.id = Some(id as u64),
                _ => return Err(Reply::err("ERR client-id should be greater than 0")),
            },
            "ADDR" => f.addr = Some(value),
            "LADDR" => f.laddr = Some(value),
            "USER" if engine.acl.lookup(&pair[1]).is_some() => f.user = Some(pair[1].clone()),
            "USER" => return Err(Reply::Error(format!("ERR No such user '{value}'"))),
            "SKIPME" => match upper(&pair[1]).as_str() {
                "YES" => f.skip_me = true,
                "NO" => f.skip_me = false,
                _ => return Err(Reply::err(SYNTAX)),
            },
            "MAXAGE" => match parse_i64(&pair[1]) {
                Some(age) if age >= 0 => f.max_age = Some(age as u64),
                _ => return Err(Reply::err(NOT_INTEGER)),
            },
            "TYPE" => match upper(&pair[1]).as_str() {
                "NORMAL" => {}
                "MASTER" | "REPLICA" | "SLAVE" | "PUBSUB" => f.none = true,
                other => return Err(Reply::Error(format!("ERR Unknown client type '{other}'"))),
            },
            _ => return Err(Reply::err(SYNTAX)),
        }
    }
    Ok(f)
}
