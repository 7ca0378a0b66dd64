//! FUNCTION DUMP and FUNCTION RESTORE in Redis 7's payload: each library's code as an
//! RDB string under opcode 245 (`RDB_OPCODE_FUNCTION2`), then the RDB version and the
//! CRC-64 (`crate::rdb`). A payload from redis-server restores here and one from here
//! restores there. RESTORE compiles every library of the payload before changing
//! anything, then applies its policy: APPEND (the default: any library that exists
//! already is an error), REPLACE (same-named libraries are replaced) or FLUSH (the
//! payload's libraries are all that remain); a function name another library holds is
//! an error under every policy. Nothing changes when anything fails.

use std::collections::BTreeMap;

use bytes::Bytes;
use dmc_resp::Reply;

use super::functions::{Library, compile, taken_function};
use crate::rdb::{self, Reader};
use crate::{Engine, Session};

/// `RDB_OPCODE_FUNCTION2`: a library's code follows.
const FUNCTION: u8 = 245;
/// `RDB_OPCODE_FUNCTION_PRE_GA`: Redis 7.0's release candidates' format.
const FUNCTION_PRE_GA: u8 = 246;

/// `FUNCTION DUMP`: every library, by name.
pub(super) fn dump(engine: &Engine) -> Reply {
    let libs = engine.functions.libraries.lock();
    let mut body = Vec::new();
    for library in libs.values() {
        body.push(FUNCTION);
        rdb::write_string(&mut body, &library.code);
    }
    Reply::Bulk(Bytes::from(rdb::finish(body)))
}

/// How RESTORE treats the libraries there already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    Append,
    Replace,
    Flush,
}

/// The libraries' code in a payload, in order.
fn codes(payload: &[u8]) -> Result<Vec<Bytes>, String> {
    let body = rdb::verify(payload).map_err(|e| e.to_string())?;
    let mut r = Reader::new(body);
    let mut codes = Vec::new();
    while !r.is_empty() {
        match r.byte().map_err(|_| "can not read data type".to_string())? {
            FUNCTION => codes.push(r.string().map_err(|e| e.to_string())?),
            FUNCTION_PRE_GA => return Err("Pre-GA function format not supported".into()),
            _ => return Err("given type is not a function".into()),
        }
    }
    Ok(codes)
}

/// `FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE]`.
pub(super) async fn restore(engine: &Engine, session: &mut Session, args: &[Bytes]) -> Reply {
    let policy = match args.get(3).map(|p| p.to_ascii_uppercase()).as_deref() {
        None | Some(b"APPEND") => Policy::Append,
        Some(b"REPLACE") => Policy::Replace,
        Some(b"FLUSH") => Policy::Flush,
        Some(_) => {
            return Reply::err(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            );
        }
    };
    let codes = match codes(&args[2]) {
        Ok(c) => c,
        Err(e) => return Reply::Error(format!("ERR {e}")),
    };
    let mut restored: BTreeMap<String, Library> = BTreeMap::new();
    for code in &codes {
        match compile(engine, session, code).await {
            Ok((name, library)) => {
                if restored.contains_key(&name) {
                    return Reply::Error(format!("ERR Library {name} already exists"));
                }
                if let Some(taken) = taken_function(&restored, &name, &library) {
                    return Reply::Error(format!("ERR Function {taken} already exists"));
                }
                restored.insert(name, library);
            }
            Err(e) => return e,
        }
    }
    let mut libs = engine.functions.libraries.lock();
    let mut next = match policy {
        Policy::Flush => BTreeMap::new(),
        _ => libs.clone(),
    };
    for (name, library) in restored {
        if policy == Policy::Append && next.contains_key(&name) {
            return Reply::Error(format!("ERR Library {name} already exists"));
        }
        if let Some(taken) = taken_function(&next, &name, &library) {
            return Reply::Error(format!("ERR Function {taken} already exists"));
        }
        next.insert(name, library);
    }
    *libs = next;
    Reply::ok()
}
