//! RDB payloads (FUNCTION RESTORE, RESTORE) from anyone: reading arbitrary bytes as a
//! payload body — opcodes, lengths, integer and LZF strings, and as a RESTORE value
//! with its listpacks, ziplists and intsets — never panics or allocates past the
//! bounds `dmc_engine::rdb` sets; a string written there reads back unchanged through
//! a verified footer, and a value RESTORE accepts dumps and reads back equal.

#![no_main]

use dmc_engine::dump::value;
use dmc_engine::rdb::{self, Reader};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // As a body: read what is there until it runs out or fails.
    let mut r = Reader::new(data);
    while !r.is_empty() {
        if r.byte().is_err() || r.string().is_err() {
            break;
        }
    }
    // As a RESTORE value: accepted values encode and decode back to themselves, as far
    // as the form DMC writes carries them (a Redis 7.2 stream's consumer active times
    // and node shapes are not in type 19).
    if let Ok(v) = value::decode(data) {
        let back = value::decode(&value::encode(&v)).map(value::comparable);
        assert_eq!(back, Ok(value::comparable(v)));
    }
    // As a whole payload: the footer check decides, without panicking.
    let _ = rdb::verify(data);
    // Written here, read back.
    let mut body = Vec::new();
    rdb::write_string(&mut body, data);
    let payload = rdb::finish(body);
    let body = rdb::verify(&payload).expect("a footer written here verifies");
    assert_eq!(&Reader::new(body).string().expect("a string written here")[..], data);
});
