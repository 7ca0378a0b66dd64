//! Encoding the replies of the hot commands (GET's bulk string or nil, SET's `+OK`,
//! INCR's integer) into a buffer with room allocates nothing: issue 14 asks for no heap
//! allocation per request on these paths, and the reply encoder is on all of them.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use bytes::{Bytes, BytesMut};
use dmc_resp::Reply;

/// The system allocator, counting the allocations of the thread that asks.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed to the system allocator unchanged; the count is a
// thread-local `Cell` (no allocation of its own).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[test]
fn hot_replies_encode_without_allocating() {
    let value = Bytes::from(vec![b'x'; 1000]);
    let replies = [
        Reply::Bulk(value),
        Reply::Null,
        Reply::ok(),
        Reply::Int(-1234567890123),
        Reply::Int(i64::MAX),
        Reply::Int(0),
    ];
    let mut out = BytesMut::with_capacity(1 << 16);
    for proto in [2, 3] {
        let before = allocations();
        for _ in 0..16 {
            for reply in &replies {
                reply.encode(proto, &mut out);
            }
        }
        assert_eq!(allocations() - before, 0, "RESP{proto}");
        out.clear();
    }
    // The count itself works: a reply that owns a string does allocate.
    let before = allocations();
    let built = Reply::err("ERR a message");
    assert!(allocations() > before);
    drop(built);
}
