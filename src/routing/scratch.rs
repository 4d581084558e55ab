//! Per-thread scratch space for routing's working lists (candidates, group plans, region
//! rankings): a profile of any size is routed without allocating once the space has grown.
//!
//! Each element type has a thread-local pool of emptied vectors. `Scratch::take` lends one
//! out and dropping it clears it and gives it back, capacity kept, so nested profiles (which
//! route while their parent's lists are still held) simply hold several at once. Routing is
//! synchronous, so a lent vector never outlives the query that took it or changes thread.

use std::cell::RefCell;
use std::fmt;
use std::ops::{Deref, DerefMut};

use super::Candidate;
use crate::geo::Metric;

/// An element type with a per-thread pool of vectors.
pub trait Pooled: Sized + 'static {
    /// Runs `f` on this thread's pool; `None` while the thread is being torn down.
    fn with_pool<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> Option<R>;
}

macro_rules! pooled {
    ($($t:ty),* $(,)?) => {$(
        impl Pooled for $t {
            fn with_pool<R>(f: impl FnOnce(&mut Vec<Vec<Self>>) -> R) -> Option<R> {
                thread_local! {
                    static POOL: RefCell<Vec<Vec<$t>>> = const { RefCell::new(Vec::new()) };
                }
                POOL.try_with(|p| f(&mut p.borrow_mut())).ok()
            }
        }
    )*};
}

pooled!(Candidate, usize, bool, u8, (usize, f64), (usize, Metric));

/// An empty vector lent from this thread's pool; it goes back, emptied, when dropped.
pub struct Scratch<T: Pooled>(Vec<T>);

impl<T: Pooled> Scratch<T> {
    /// An empty vector from the pool (a new, unallocated one when the pool is empty).
    pub fn take() -> Scratch<T> {
        Scratch(T::with_pool(Vec::pop).flatten().unwrap_or_default())
    }

    /// A vector from the pool holding `items`.
    pub fn collect(items: impl IntoIterator<Item = T>) -> Scratch<T> {
        let mut s = Scratch::take();
        s.extend(items);
        s
    }
}

impl<T: Pooled> Drop for Scratch<T> {
    fn drop(&mut self) {
        let mut v = std::mem::take(&mut self.0);
        v.clear();
        // Kept only if it ever held something: an unallocated vector is free to make anew.
        if v.capacity() > 0 {
            T::with_pool(|p| p.push(v));
        }
    }
}

impl<T: Pooled> Deref for Scratch<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T: Pooled> DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

impl<T: Pooled + Clone> Clone for Scratch<T> {
    fn clone(&self) -> Self {
        Scratch::collect(self.iter().cloned())
    }
}

impl<T: Pooled + PartialEq> PartialEq for Scratch<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<T: Pooled + fmt::Debug> fmt::Debug for Scratch<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_come_back_emptied_with_their_capacity() {
        let mut a: Scratch<usize> = Scratch::take();
        a.extend(0..100);
        let ptr = a.as_ptr();
        drop(a);
        let b: Scratch<usize> = Scratch::take();
        assert!(b.is_empty());
        assert!(b.capacity() >= 100);
        assert_eq!(b.as_ptr(), ptr, "the same vector is lent again");
        // Held at once (a nested profile's lists): a second one is a different vector.
        let c: Scratch<usize> = Scratch::collect([7, 8]);
        assert_ne!(c.as_ptr(), ptr);
        assert_eq!(&c[..], &[7, 8]);
        drop((b, c));
        // Each type has its own pool.
        let d: Scratch<u8> = Scratch::take();
        assert_eq!(d.capacity(), 0);
    }
}
