//! Connections handed from one thread to another: the groups' acceptor to a group's loop
//! (poll64, uring64), a thread pool's workers to its poller. Written once; the receiver waits on
//! the inbox's waker in its own way (a selector, an io_uring read, epoll).

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use sockscale_sys::Waker;

#[derive(Debug)]
struct Queue<T> {
    items: Vec<T>,
    closed: bool,
}

/// A queue of `T` with a waker that is woken when the queue stops being empty. The receiver
/// resets the waker before it takes, so a push after that raises a new wake-up.
#[derive(Debug)]
pub struct Inbox<T> {
    queue: Mutex<Queue<T>>,
    waker: Arc<Waker>,
}

impl<T> Inbox<T> {
    pub fn new() -> io::Result<Self> {
        Ok(Inbox { queue: Mutex::new(Queue { items: Vec::new(), closed: false }), waker: Arc::new(Waker::new()?) })
    }

    fn lock(&self) -> MutexGuard<'_, Queue<T>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hand `item` over; gives it back if the inbox is closed.
    pub fn push(&self, item: T) -> Result<(), T> {
        let mut queue = self.lock();
        if queue.closed {
            return Err(item);
        }
        // A non-empty queue has a wake-up pending already (the receiver resets the waker before
        // it takes).
        let wake = queue.items.is_empty();
        queue.items.push(item);
        drop(queue);
        if wake {
            self.waker.wake();
        }
        Ok(())
    }

    pub fn waker(&self) -> &Waker {
        &self.waker
    }

    /// The waker, to be woken by others too (a shutdown's phase change).
    pub fn shared_waker(&self) -> Arc<Waker> {
        self.waker.clone()
    }

    /// The receiver takes everything queued, oldest first, by swapping it with `into` (which
    /// must be empty: neither side allocates again once both have grown to the traffic).
    /// Returns whether the inbox is closed.
    pub fn take_into(&self, into: &mut Vec<T>) -> bool {
        self.waker.reset();
        let mut queue = self.lock();
        std::mem::swap(&mut queue.items, into);
        queue.closed
    }

    /// Take no more: later pushes are given back. Returns what was never taken (the receiver
    /// at its end, or a sender whose receivers may be gone) and wakes the receiver.
    pub fn close(&self) -> Vec<T> {
        let items = {
            let mut queue = self.lock();
            queue.closed = true;
            std::mem::take(&mut queue.items)
        };
        self.waker.wake();
        items
    }

    /// Take no more, and tell the receiver, which takes what is queued ([`Inbox::take_into`]
    /// then says closed).
    pub fn stop(&self) {
        self.lock().closed = true;
        self.waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_gives_back_what_was_never_taken() {
        let inbox = Inbox::new().expect("eventfd");
        inbox.push('a').expect("open");
        assert_eq!(inbox.close(), ['a']);
        assert_eq!(inbox.push('b'), Err('b'));
    }

    #[test]
    fn items_arrive_in_order_until_closed_and_are_given_back_after() {
        let inbox = Inbox::new().expect("eventfd");
        inbox.push(1).expect("open");
        inbox.push(2).expect("open");
        let mut taken = Vec::new();
        assert!(!inbox.take_into(&mut taken));
        assert_eq!(taken, [1, 2]);
        inbox.push(3).expect("open");
        inbox.stop();
        assert_eq!(inbox.push(4), Err(4));
        taken.clear();
        assert!(inbox.take_into(&mut taken), "stopped");
        assert_eq!(taken, [3], "queued before the stop is the receiver's");
        inbox.push(5).expect_err("stopped");
        assert!(inbox.close().is_empty());
    }
}
