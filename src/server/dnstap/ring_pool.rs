//! The fixed pool of rings the TCP connections log into, taken and given back without a
//! lock: each slot is claimed with one compare-and-swap, and only its claimer touches the
//! ring inside, so a connection never waits for another to take its ring.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

use super::ring::Sender;

pub(super) struct RingPool {
    slots: Box<[Slot]>,
}

struct Slot {
    /// Set by whoever holds the slot: a connection using its ring, or the stopping writer.
    taken: AtomicBool,
    /// The ring while the slot is free; empty while a connection uses it.
    sender: UnsafeCell<Option<Sender>>,
}

// SAFETY: a slot's `sender` is only read or written by the thread that set its `taken`
// from false to true (Acquire), until that thread stores false again (Release), so no two
// threads ever touch it at once. `Sender` itself is `Send`.
unsafe impl Sync for RingPool {}

/// A ring taken from the pool, with the slot it goes back to.
pub(super) struct Taken {
    pub sender: Sender,
    slot: usize,
}

impl RingPool {
    pub(super) fn new(senders: Vec<Sender>) -> RingPool {
        let slots = senders
            .into_iter()
            .map(|s| Slot { taken: AtomicBool::new(false), sender: UnsafeCell::new(Some(s)) })
            .collect();
        RingPool { slots }
    }

    /// A ring nobody holds, if there is one; never waits.
    pub(super) fn take(&self) -> Option<Taken> {
        for (i, slot) in self.slots.iter().enumerate() {
            if slot.taken.load(Ordering::Relaxed)
                || slot
                    .taken
                    .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                    .is_err()
            {
                continue;
            }
            // SAFETY: this thread just claimed the slot (see `Sync` above).
            let sender = unsafe { (*slot.sender.get()).take() };
            match sender {
                Some(sender) => return Some(Taken { sender, slot: i }),
                // Emptied by a stopping writer, which never frees a slot again.
                None => slot.taken.store(true, Ordering::Release),
            }
        }
        None
    }

    /// Puts a taken ring back in its slot.
    pub(super) fn give_back(&self, taken: Taken) {
        let slot = &self.slots[taken.slot];
        // SAFETY: the slot is still claimed by the holder of `taken`, which is this thread.
        unsafe { *slot.sender.get() = Some(taken.sender) };
        slot.taken.store(false, Ordering::Release);
    }

    /// Drops the rings of every free slot and keeps the slots claimed: nothing more comes
    /// through them, and the writer sees them let go of. For a stopping writer; rings given
    /// back later are dropped by the next call.
    pub(super) fn close_free(&self) {
        for slot in self.slots.iter() {
            if slot
                .taken
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                // SAFETY: this thread just claimed the slot, and keeps it.
                drop(unsafe { (*slot.sender.get()).take() });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::ring::ring;
    use super::*;

    #[test]
    fn each_ring_is_held_by_one_taker_until_given_back() {
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..3).map(|_| ring(1024)).unzip();
        let pool = RingPool::new(senders);
        let taken: Vec<Taken> = (0..3).map(|_| pool.take().expect("a free ring")).collect();
        let mut slots: Vec<usize> = taken.iter().map(|t| t.slot).collect();
        slots.sort();
        assert_eq!(slots, [0, 1, 2], "three different rings");
        assert!(pool.take().is_none(), "all taken: none, at once");
        let mut taken = taken.into_iter();
        pool.give_back(taken.next().unwrap());
        let again = pool.take().expect("the ring given back");
        assert_eq!(again.slot, 0);
        // Stopping: free rings are dropped (their receivers see them let go of), held ones
        // stay with their holders, and nothing can be taken any more.
        pool.give_back(again);
        pool.close_free();
        assert!(receivers[0].finished());
        assert!(!receivers[1].finished() && !receivers[2].finished());
        assert!(pool.take().is_none());
        let held = taken.next().unwrap();
        let slot = held.slot;
        pool.give_back(held);
        pool.close_free();
        assert!(receivers[slot].finished(), "given back after the stop, dropped by the next");
    }
}
