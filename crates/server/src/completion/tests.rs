//! The io_uring worker against real sockets and a real ring.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use socket2::{Domain, Socket, Type};
use sockscale_proto::Protocol;

use super::ring_conn::{NextSend, SpareSends, UConn};
use super::worker::Census;
use super::{UringSource, UringWorker, WorkerSetup};
use crate::config::Config;
use crate::connection::Connection;
use crate::model::Model;
use crate::policy::CloseReason;
use crate::pool::BufferPool;
use crate::resources::Resources;
use crate::shutdown::Shutdown;
use crate::stats::{Counters, Stats};

fn listener() -> (Arc<Socket>, SocketAddr) {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    socket.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).expect("bind");
    socket.listen(128).expect("listen");
    socket.set_nonblocking(true).expect("non-blocking");
    let addr = socket.local_addr().expect("local address").as_socket().expect("an IP address");
    (Arc::new(socket), addr)
}

/// A submit that fails while the submission queue is full must not lose the operation it was
/// making room for. A ring of 4 entries is given more connections at once than it has room
/// for: every client connects and sends before the worker's first turn, so that turn reaps
/// all the accepts in one batch and arms a receive for each, filling the queue, and the
/// submits that would make room fail (EBUSY, injected). Every client must still get its echo,
/// and once they leave, every connection must close and free its slot.
#[test]
fn a_failed_submit_loses_no_operation() {
    if let Some(reason) = super::unavailable() {
        eprintln!("skipped: io_uring is unavailable here: {reason}");
        return;
    }
    const CLIENTS: usize = 12;
    const FAILURES: u32 = 4;
    let cfg = Config { model: Model::Uring, threads: 1, ..Config::default() };
    let stats = Stats::new(1);
    let pool = BufferPool::new(cfg.buffer_size, 64, false).expect("pool");
    let shutdown = Shutdown::new();
    let (socket, addr) = listener();
    let clients_gone = AtomicBool::new(false);

    let (census, missing) = std::thread::scope(|scope| {
        let (built_tx, built_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let (cfg, stats, pool, shutdown, clients_gone) = (&cfg, &stats, &pool, &shutdown, &clients_gone);
        let worker = scope.spawn(move || -> Census {
            let setup = WorkerSetup {
                cfg,
                protocol: Protocol::Echo,
                resources: &Arc::default(),
                stats,
                counters: stats.shard(0),
                pool,
                shutdown: shutdown.clone(),
                source: UringSource::Listener(socket),
                entries: 4,
                group: None,
                active: None,
                udp: None,
            };
            let mut worker = UringWorker::new(setup).expect("a ring");
            worker.fail_submits = FAILURES;
            built_tx.send(()).expect("the test waits");
            let _ = go_rx.recv();
            // Serve until the clients have left and their connections are gone, or for five
            // seconds after they left.
            let mut deadline = None;
            while deadline.is_none_or(|at| Instant::now() < at) {
                worker.turn().expect("a turn");
                if deadline.is_none() && clients_gone.load(Ordering::Acquire) {
                    deadline = Some(Instant::now() + Duration::from_secs(5));
                }
                if deadline.is_some() && worker.census().conns == 0 {
                    break;
                }
            }
            let census = worker.census();
            shutdown.shutdown();
            worker.run().expect("a clean stop");
            census
        });
        built_rx.recv().expect("the worker is built");
        let mut clients: Vec<(TcpStream, Vec<u8>)> = (0..CLIENTS)
            .map(|i| {
                let mut stream = TcpStream::connect(addr).expect("connect");
                let message = format!("hello from client {i}").into_bytes();
                stream.write_all(&message).expect("send");
                (stream, message)
            })
            .collect();
        go_tx.send(()).expect("the worker waits");
        let mut missing = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(3);
        for (i, (stream, message)) in clients.iter_mut().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(10));
            stream.set_read_timeout(Some(left)).expect("timeout");
            let mut echo = vec![0; message.len()];
            if stream.read_exact(&mut echo).is_err() || echo != *message {
                missing.push(i);
            }
        }
        drop(clients);
        clients_gone.store(true, Ordering::Release);
        (worker.join().expect("the worker thread"), missing)
    });

    assert_eq!(census.fail_submits, 0, "the submission queue never filled: the test did not test anything");
    assert!(missing.is_empty(), "clients {missing:?} never got their echo: an operation was lost ({census:?})");
    assert_eq!(
        census,
        Census { conns: 0, conn_ops: 0, worker_ops: 2, held_buffers: 0, spare_sends: 0, backlog: 0, fail_submits: 0 },
        "after the clients left, only the wake-up read and the accept should be in flight"
    );
    assert_eq!(stats.current(), 0, "every connection is counted closed");
    assert_eq!(stats.snapshot().closed(CloseReason::Peer), CLIENTS as u64);
}

fn lone_conn() -> UConn {
    let (a, _b) = UnixStream::pair().expect("a socket pair");
    let session = Protocol::Echo.responder(0).new_session();
    let x = Connection::pushed(session, Instant::now(), &Resources::default(), &Counters::default()).expect("in clear");
    UConn::new(OwnedFd::from(a), x, 0)
}

/// A short send puts exactly what the socket did not take back at the front of the queue, in
/// order, ahead of what was queued meanwhile; the box goes back to the spares.
#[test]
fn a_short_send_requeues_the_rest_in_order() {
    let mut spares = SpareSends::default();
    for written in [0, 1, 3, 4, 8, 9] {
        let mut conn = lone_conn();
        for chunk in ["abc", "defg", "hi"] {
            conn.queue(Bytes::from_static(chunk.as_bytes()));
        }
        let NextSend::Post(_entry) = conn.send_queued(0, &mut spares) else { panic!("a send") };
        assert_eq!(conn.pending().bytes, 9);
        conn.queue(Bytes::from_static(b"JK"));
        assert!(matches!(conn.send_queued(0, &mut spares), NextSend::Nothing), "one send in flight at a time");
        let sent = conn.send_done().expect("the send in flight");
        conn.requeue_unsent(&sent, written, None);
        spares.give(sent, 1);
        assert_eq!(conn.queued_bytes(), [&b"abcdefghi"[written..], b"JK"].concat(), "{written} written");
        assert_eq!(conn.pending().bytes, 9 - written + 2);
        assert_eq!(spares.len(), 1);
    }
    // An echo sent from a ring buffer: its rest is copied, the buffer going back to the kernel.
    let mut conn = lone_conn();
    let _entry = conn.send_ring_buffer(0, &mut spares, 3, b"hello");
    assert_eq!(spares.len(), 0, "the spare box was reused");
    let sent = conn.send_done().expect("the send in flight");
    assert_eq!(sent.ring_buffer(), Some((3, 5)));
    conn.requeue_unsent(&sent, 2, Some(b"hello"));
    assert_eq!(conn.queued_bytes(), b"llo");
}
