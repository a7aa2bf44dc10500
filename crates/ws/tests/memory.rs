//! What a connection holds between calls, measured by a counting allocator (alone in this test
//! binary, so no other test's allocations are counted): nothing beyond the session itself when
//! idle without permessage-deflate, and zlib's states with it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use sockscale_ws::{ClientSession, Config, DeflateParams, Kind, Session, Stats, Verdict};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is kept.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is passed on as it is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout (above).
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap octets a server session holds after echoing one 512-octet message, beyond its own
/// struct (boxed here so it is counted too).
fn held_after_one_message(deflate: Option<&DeflateParams>) -> isize {
    let now = Instant::now();
    let mut client = ClientSession::new(&Config::default(), deflate, fastrand::Rng::with_seed(9), now);
    let mut request = Vec::new();
    assert!(client.send(Kind::Binary, &[b'x'; 512], &mut request));
    let before = LIVE.load(Ordering::Relaxed);
    let mut server = Box::new(Session::new(&Config::default(), deflate, now));
    let mut out = Vec::new();
    assert_eq!(server.receive(&request, now, &mut Stats::default(), &mut out), Verdict::Continue);
    drop(out);
    let held = LIVE.load(Ordering::Relaxed) - before;
    println!("deflate {}: {held} octets held (session struct {} of them)", deflate.is_some(), size_of::<Session>());
    drop(server);
    held
}

#[test]
fn what_a_connection_holds_between_messages() {
    let plain = held_after_one_message(None);
    assert_eq!(plain, size_of::<Session>() as isize, "an idle session holds no buffer");
    let params = DeflateParams {
        server_no_context_takeover: false,
        client_no_context_takeover: false,
        server_max_window_bits: 15,
        client_max_window_bits: 15,
        level: 1,
    };
    let deflate = held_after_one_message(Some(&params));
    assert!(deflate > plain, "zlib's states are held");
    let small = DeflateParams { server_max_window_bits: 9, client_max_window_bits: 9, ..params };
    let small = held_after_one_message(Some(&small));
    assert!(small < deflate, "smaller windows hold less: {small} vs {deflate}");
    // Without context takeover either way (`serve --ws-deflate-takeover off`) zlib's states live
    // only while a message is inflated or compressed: between messages the session holds what a
    // fresh one does.
    let lean = DeflateParams { server_no_context_takeover: true, client_no_context_takeover: true, ..params };
    let fresh = held_fresh(Some(&lean));
    let lean = held_after_one_message(Some(&lean));
    assert_eq!(lean, fresh, "no zlib state kept between messages without context takeover");
    println!("held between messages: plain {plain}, deflate 15 bits {deflate}, 9 bits {small}, no takeover {lean}");
}

/// Heap octets a server session holds before any message (boxed, as above).
fn held_fresh(deflate: Option<&DeflateParams>) -> isize {
    let before = LIVE.load(Ordering::Relaxed);
    let server = Box::new(Session::new(&Config::default(), deflate, Instant::now()));
    let held = LIVE.load(Ordering::Relaxed) - before;
    drop(server);
    held
}
