//! A webhook's bounded queue of messages waiting to be sent, and the backoff between the
//! attempts at one message. Pure: the sender task holds the queue under a mutex and wakes
//! on a `Notify`.

use std::collections::VecDeque;
use std::time::Duration;

/// The wait before the first retry; each retry waits twice the one before.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The wait before retry `retry` (1 for the first retry): 1s, 2s, 4s... at most
/// `MAX_BACKOFF`.
pub fn backoff(retry: u32) -> Duration {
    let doublings = retry.saturating_sub(1).min(16);
    (FIRST_BACKOFF * (1u32 << doublings)).min(MAX_BACKOFF)
}

/// At most `capacity` messages; pushing onto a full queue drops the oldest, since the
/// newest say what holds now.
#[derive(Debug)]
pub struct Queue<T> {
    items: VecDeque<T>,
    capacity: usize,
}

impl<T> Queue<T> {
    pub fn new(capacity: usize) -> Queue<T> {
        Queue { items: VecDeque::new(), capacity: capacity.max(1) }
    }

    /// Adds `item` at the back; returns how many were dropped to make room (0 or 1).
    pub fn push(&mut self, item: T) -> usize {
        let mut dropped = 0;
        while self.items.len() >= self.capacity {
            self.items.pop_front();
            dropped += 1;
        }
        self.items.push_back(item);
        dropped
    }

    pub fn pop(&mut self) -> Option<T> {
        self.items.pop_front()
    }

    /// A reload changed the bound: a smaller one drops the oldest at once; returns how many.
    pub fn resize(&mut self, capacity: usize) -> usize {
        self.capacity = capacity.max(1);
        let over = self.items.len().saturating_sub(self.capacity);
        self.items.drain(..over);
        over
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let secs: Vec<u64> = (1..=9).map(|r| backoff(r).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn a_full_queue_drops_the_oldest() {
        let mut q = Queue::new(3);
        let dropped: Vec<usize> = (1..=5).map(|i| q.push(i)).collect();
        assert_eq!(dropped, [0, 0, 0, 1, 1]);
        assert_eq!(q.len(), 3);
        assert_eq!(q.resize(2), 1);
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(4), Some(5), None));
        assert!(q.is_empty());
        assert_eq!(Queue::<u8>::new(0).push(1), 0, "a queue holds at least one");
    }
}
